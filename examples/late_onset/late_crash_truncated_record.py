# expect-incident: failure at step >= 150 on rank 1
# expect-verdict: failure
# expect-first-fix: __getitem__
"""Late crash: one truncated record in the data, reached at step ``--onset`` on rank 1. The
dataset decodes fixed-size float32 records from raw bytes; one record (the 6th sample of
rank 1's batch at the onset step, chosen with the same seeded ``DistributedSampler`` order)
lost its last 4 bytes, so it decodes to 127 features instead of 128. ``__getitem__`` does not
check, and the DataLoader's ``default_collate`` fails on rank 1 with "stack expects each
tensor to be equal size". Rank 1 exits; rank 0 is left in the next gradient all-reduce
until gloo notices the closed connection (or torchrun stops it). Healthy until then.

Imitates the many "RuntimeError: stack expects each tensor to be equal size" threads on the
PyTorch forums (a corrupt or differently-shaped sample deep into an epoch, on one rank), and
the PyTorch data loading docs on ``collate_fn``. Fix: validate the record in ``__getitem__``
(shape/length check, skip or repair the sample, log its index) or clean the data set.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/late_crash_truncated_record.py
    torchrun ... late_crash_truncated_record.py --no-cause     # no truncated record: healthy

Measured 2026-11-28 23:09-23:28 UTC on the shared 2-core host (load average 7-9 from
other jobs, so wall times swing by up to ~50 % between runs; the per-rank CPU time of a
step is steadier), at commit 67172fa with this file added,
plain ``torchrun --standalone --nproc_per_node=2``, under ``nice -n 10``, medians of
steps 20..onset-1 (before) and onset+5..end (after):

    cause:    exit 1 after 18.7 s: rank 1 "RuntimeError: stack expects each tensor to be equal
              size, but got [128] at entry 0 and [127] at entry 5" at step 150 (steps 0-149 at a
              median ~24 ms), rank 0 "Connection closed by peer" in its next all-reduce; torchrun
              SIGTERMs it
    --no-cause: exit 0, 300 steps, wall 29.8 -> 33.6 ms median
"""

import argparse
import statistics
import sys
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


class RawRecords(Dataset):
    """Fixed-size float32 records stored as bytes, decoded in ``__getitem__``."""

    def __init__(self, records):
        self.records = records

    def __len__(self):
        return len(self.records)

    def __getitem__(self, index):
        features = np.frombuffer(self.records[index], dtype=np.float32)
        return torch.from_numpy(features.copy()), index % CLASSES


def build_records(length, truncated_index):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((length, FEATURES), dtype=np.float32)
    records = [row.tobytes() for row in data]
    if truncated_index is not None:
        records[truncated_index] = records[truncated_index][:-4]  # a short write
    return records


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
    p.add_argument("--onset", type=int, default=150, help="the step whose batch holds the bad record")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--no-cause", action="store_true", help="no truncated record")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    length = args.steps * args.batch * world
    # the index rank 1 reads 6th in its batch at the onset step (the same order on every rank)
    rank1_order = list(DistributedSampler(range(length), world, rank=1, shuffle=True, seed=0))
    bad = None if args.no_cause else rank1_order[args.onset * args.batch + 5]
    dataset = RawRecords(build_records(length, bad))
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=0)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 768),
            torch.nn.ReLU(),
            torch.nn.Linear(768, 768),
            torch.nn.ReLU(),
            torch.nn.Linear(768, CLASSES),
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
