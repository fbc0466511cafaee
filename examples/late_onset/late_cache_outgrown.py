# expect-incident: slowdown at step >= 150 on rank any
# expect-verdict: dataloader
# expect-first-fix: num_workers
"""Late slowdown: the dataset's in-memory cache is outgrown at step ``--onset``. The Dataset
keeps decoded samples in a dict that was warmed for an older, smaller version of the data
(the first ``onset`` batches of every rank); past it, ``__getitem__`` opens the shard file,
seeks and reads each sample (plus ``--read-latency-ms`` per sample for a network file
system), in the training process itself (``num_workers=0``). Both ranks slow down together:
the loader time grows from ~0 to 20-30 ms per step, the model is unchanged.

Imitates the common "training is fast for the first N iterations, then gets slow" reports on
the PyTorch forums where a caching Dataset (``functools.lru_cache`` or a dict filled in
``__getitem__``) stops hitting once the data outgrows it, and the PyTorch data loading
docs' advice to use worker processes (``num_workers``) to overlap loading with compute.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/late_cache_outgrown.py
    torchrun ... late_cache_outgrown.py --no-cause     # cache covers everything: healthy

Measured 2026-11-28 23:09-23:28 UTC on the shared 2-core host (load average 7-9 from
other jobs, so wall times swing by up to ~50 % between runs; the per-rank CPU time of a
step is steadier), at commit 67172fa with this file added,
plain ``torchrun --standalone --nproc_per_node=2``, under ``nice -n 10``, medians of
steps 20..onset-1 (before) and onset+5..end (after):

    cause:    wall 12.1 -> 44.1 ms (rank 0), 11.9 -> 43.6 ms (rank 1); CPU 4.3 -> 7.7 ms
    --no-cause: wall 11.5 -> 20.0 ms (host load rose), CPU 4.1 -> 4.8 ms
    an earlier cause run at lower load: wall 9.0 -> 36.8 ms on both ranks
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

FEATURES = 128
CLASSES = 10


def make_sample(index):
    rng = np.random.default_rng(index)
    return rng.standard_normal(FEATURES, dtype=np.float32), index % CLASSES


class ShardWithWarmCache(Dataset):
    """Samples cached in RAM up to ``cache_size``; the rest read one by one from a shard file."""

    def __init__(self, length, cache_size, shard_path, read_latency_s):
        self.length = length
        self.shard_path = shard_path
        self.read_latency_s = read_latency_s
        self.record_bytes = FEATURES * 4
        self.cache = {i: make_sample(i) for i in range(min(cache_size, length))}
        with open(shard_path, "wb") as shard:
            for i in range(length):
                shard.write(make_sample(i)[0].tobytes())

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if index in self.cache:
            features, label = self.cache[index]
        else:
            with open(self.shard_path, "rb") as shard:
                shard.seek(index * self.record_bytes)
                features = np.frombuffer(shard.read(self.record_bytes), dtype=np.float32).copy()
            time.sleep(self.read_latency_s)  # the network file system's round trip
            label = index % CLASSES
        return torch.from_numpy(features), label


class StepClock:
    """Per-step wall and CPU (this process) times; medians every ``every`` steps to stderr."""

    def __init__(self, rank, onset, every=20):
        self.rank, self.onset, self.every = rank, onset, every
        self.wall, self.cpu = [], []

    def add(self, step, wall_seconds, cpu_seconds):
        self.wall.append(wall_seconds)
        self.cpu.append(cpu_seconds)
        if (step + 1) % self.every == 0:
            wall, cpu = self.wall[-self.every :], self.cpu[-self.every :]
            print(
                f"[rank {self.rank}] steps {step + 1 - self.every}-{step}: "
                f"median {statistics.median(wall) * 1e3:.1f} ms (cpu {statistics.median(cpu) * 1e3:.1f}), "
                f"max {max(wall) * 1e3:.1f} ms",
                file=sys.stderr,
                flush=True,
            )

    def summary(self):
        def describe(times):
            return (
                f"median {statistics.median(times) * 1e3:.1f} ms "
                f"(mean {statistics.mean(times) * 1e3:.1f}, max {max(times) * 1e3:.1f})"
            )

        first, last = slice(20, self.onset), slice(self.onset + 5, None)
        if self.wall[first] and self.wall[last]:
            print(
                f"[rank {self.rank}] SUMMARY wall before onset {describe(self.wall[first])}; "
                f"after {describe(self.wall[last])} | cpu before "
                f"{statistics.median(self.cpu[first]) * 1e3:.1f} ms, "
                f"after {statistics.median(self.cpu[last]) * 1e3:.1f} ms",
                file=sys.stderr,
                flush=True,
            )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--onset", type=int, default=150)
    p.add_argument("--batch", type=int, default=96)
    p.add_argument("--read-latency-ms", type=float, default=0.15)
    p.add_argument("--no-cause", action="store_true", help="the cache holds the whole dataset")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    length = args.steps * args.batch * world
    cache_size = length if args.no_cause else args.onset * args.batch * world
    with tempfile.TemporaryDirectory() as tmp:
        dataset = ShardWithWarmCache(length, cache_size, os.path.join(tmp, "shard.bin"), args.read_latency_ms / 1e3)
        sampler = DistributedSampler(dataset, shuffle=False)  # cached samples come first
        loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=0)
        model = DDP(
            torch.nn.Sequential(
                torch.nn.Linear(FEATURES, 512),
                torch.nn.ReLU(),
                torch.nn.Linear(512, 512),
                torch.nn.ReLU(),
                torch.nn.Linear(512, CLASSES),
            )
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        clock = StepClock(rank, args.onset)
        batches = iter(loader)
        for step in range(args.steps):
            start, start_cpu = time.perf_counter(), time.process_time()
            x, y = next(batches)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.add(step, time.perf_counter() - start, time.process_time() - start_cpu)
        clock.summary()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
