# expect-incident: slowdown at step >= 150 on rank any
# expect-verdict: compute
# expect-first-fix: accumulate_predictions
"""Late slowdown from a host-side copy that grows every step. From step ``--onset`` (when the
"track predictions" callback is enabled after warm-up) every rank keeps its predictions for
an epoch-level metric with ``accumulate_predictions``, which does
``state = torch.cat([state, logits.detach()])``: each step copies the whole buffer kept so
far into a new one (and the allocator maps fresh pages for it). A memory leak in effect, and a
cost proportional to the steps since the onset: ~0 at the onset, tens of ms per step later.
Both ranks do it, so both slow down together, in plain CPU work (``aten::cat``) in the loop.

Imitates metric code that concatenates per-step outputs into a growing tensor (the pattern
the TorchMetrics docs warn about for "cat" states, and forum threads on "training gets
slower every iteration" / "CPU memory keeps growing" caused by keeping outputs around).
Fixes: append to a Python list and ``torch.cat`` once at the end of the epoch, or keep a
running statistic, or preallocate.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/late_prediction_cat_leak.py
    torchrun ... late_prediction_cat_leak.py --no-cause     # list + one cat at the end: healthy

Measured 2026-11-28 23:09-23:28 UTC on the shared 2-core host (load average 7-9 from
other jobs, so wall times swing by up to ~50 % between runs; the per-rank CPU time of a
step is steadier), at commit 67172fa with this file added,
plain ``torchrun --standalone --nproc_per_node=2``, under ``nice -n 10``, medians of
steps 20..onset-1 (before) and onset+5..end (after):

    cause:    wall 21.2 -> 79.9 ms (rank 0), 21.3 -> 76.9 ms (rank 1); CPU 5.9 -> 13.6 ms and
              5.8 -> 14.0 ms; 29 MiB of predictions per rank at the end, growing every step
    --no-cause: wall 19.6 -> 27.5 ms (host load rose), CPU 5.9 -> 6.1 ms
"""

import argparse
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def accumulate_predictions(state, logits):
    """Grow the epoch's prediction buffer by this step's logits (copies the whole buffer)."""
    if state is None:
        return logits.detach().clone()
    return torch.cat([state, logits.detach()])


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
    p.add_argument("--steps", type=int, default=350)
    p.add_argument("--onset", type=int, default=150)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--classes", type=int, default=300)
    p.add_argument("--no-cause", action="store_true", help="collect in a list, cat once at the end")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n = args.steps * args.batch * world
    dataset = TensorDataset(torch.randn(n, 64), torch.randint(0, args.classes, (n,)))
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=0)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Linear(64, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, args.classes),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = StepClock(rank, args.onset)
    predictions, kept = None, []
    for step, (x, y) in enumerate(loader):
        if step == args.steps:
            break
        start, start_cpu = time.perf_counter(), time.process_time()
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= args.onset:
            if args.no_cause:
                kept.append(logits.detach())
            else:
                predictions = accumulate_predictions(predictions, logits)
        clock.add(step, time.perf_counter() - start, time.process_time() - start_cpu)
    if args.no_cause and kept:
        predictions = torch.cat(kept)
    clock.summary()
    if predictions is not None:
        print(
            f"[rank {rank}] kept {predictions.numel() * 4 / 2**20:.0f} MiB of predictions", file=sys.stderr, flush=True
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
