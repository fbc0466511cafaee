# expect-incident: straggler at step >= 150 on rank 1
# expect-verdict: imbalance
# expect-first-fix: process
"""Late straggler: a noisy neighbour starts on rank 1's CPU at step ``--onset``. Each rank is
pinned to its own core (rank r on CPU r, as a launcher with ``--cpu-bind``/``taskset``/
``numactl`` would do) with one intra-op thread. At the onset rank 1 starts an unrelated
process (a stand-in for a co-located job, a log compressor or a monitoring agent that cron
started on the node) that spins on the same core at the same priority. Rank 1's forward and
backward then get about half the core, and rank 0 waits for it in the gradient all-reduce
every step: both ranks' steps slow down, but only rank 1 computes slowly.

Imitates the CPU-affinity and oversubscription advice in the PyTorch Performance Tuning
Guide (pin processes, keep other work off the training cores) and the frequent forum reports
of one DDP rank being slower because something else shares its CPUs.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/late_noisy_neighbour.py
    torchrun ... late_noisy_neighbour.py --no-cause     # no neighbour: healthy

The neighbour stops by itself when rank 1 exits (it polls its parent) or after 10 minutes.

Measured 2026-11-28 23:09-23:28 UTC on the shared 2-core host (load average 7-9 from
other jobs, so wall times swing by up to ~50 % between runs; the per-rank CPU time of a
step is steadier), at commit 67172fa with this file added,
plain ``torchrun --standalone --nproc_per_node=2``, under ``nice -n 10``, medians of
steps 20..onset-1 (before) and onset+5..end (after):

    cause:    wall 35.1 -> 55.1 ms (rank 1), 33.8 -> 56.0 ms (rank 0); CPU flat (9.2 -> 10.3 ms
              on rank 1: it is descheduled, not doing more work)
    --no-cause: wall 40.4 -> 43.7 ms (rank 1), 40.0 -> 44.5 ms (rank 0); CPU 9.7 -> 10.4 ms
    an earlier cause run at load ~5: wall 18.6 -> 33.1 ms (rank 1), 19.0 -> 32.5 ms (rank 0)
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

NEIGHBOUR = """
import os, sys, time
parent, cpu = int(sys.argv[1]), int(sys.argv[2])
os.sched_setaffinity(0, {cpu})
deadline = time.monotonic() + 600
while os.getppid() == parent and time.monotonic() < deadline:
    for _ in range(100000):
        pass
"""


def start_neighbour(cpu):
    return subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(os.getpid()), str(cpu)])


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
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--no-cause", action="store_true", help="never start the neighbour")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    cpus = sorted(os.sched_getaffinity(0))
    my_cpu = cpus[rank % len(cpus)]
    os.sched_setaffinity(0, {my_cpu})
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n = args.steps * args.batch * world
    dataset = TensorDataset(torch.randn(n, 128), torch.randint(0, 10, (n,)))
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=0)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Linear(128, 768),
            torch.nn.ReLU(),
            torch.nn.Linear(768, 768),
            torch.nn.ReLU(),
            torch.nn.Linear(768, 10),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = StepClock(rank, args.onset)
    neighbour = None
    batches = iter(loader)
    try:
        for step in range(args.steps):
            if step == args.onset and rank == 1 and not args.no_cause:
                neighbour = start_neighbour(my_cpu)
            start, start_cpu = time.perf_counter(), time.process_time()
            x, y = next(batches)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.add(step, time.perf_counter() - start, time.process_time() - start_cpu)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    clock.summary()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
