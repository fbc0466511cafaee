# expect-incident: hang at step >= 150 on rank any
# expect-verdict: failure
# expect-first-fix: barrier
"""Late hang: a barrier that only rank 0 reaches. At step ``--onset`` (a "checkpoint every N
steps" point) the script saves a checkpoint on rank 0 and then, still inside
``if rank == 0:``, calls ``dist.barrier()`` "so that the others wait for the file". Rank 1
never enters that branch: it goes on to the next step and blocks in DDP's gradient
all-reduce, while rank 0 blocks in the barrier. Neither collective can complete; nothing is
printed until the process group's timeout (``--timeout``, 60 s by default, passed to
``init_process_group``) expires and gloo raises on the ranks, and torchrun tears the job down.
The steps before the onset are healthy.

Imitates the PyTorch forum/issue reports of DDP hanging at checkpoint time because a
collective (``barrier``, ``all_reduce``, ``save`` helpers that sync) sits inside an
``if rank == 0`` block, and the ``torch.distributed`` docs' rule that collectives must be
called by every rank of the group in the same order. Fix: call ``dist.barrier()`` on every
rank, outside the ``if rank == 0`` block.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/late_hang_rank0_barrier.py
    torchrun ... late_hang_rank0_barrier.py --timeout 15      # quicker check
    torchrun ... late_hang_rank0_barrier.py --no-cause        # barrier on every rank: healthy

Measured 2026-11-28 23:09-23:28 UTC on the shared 2-core host (load average 7-9 from
other jobs, so wall times swing by up to ~50 % between runs; the per-rank CPU time of a
step is steadier), at commit 67172fa with this file added,
plain ``torchrun --standalone --nproc_per_node=2``, under ``nice -n 10``, medians of
steps 20..onset-1 (before) and onset+5..end (after):

    cause (default --timeout 60): steps 100-139 at a median 19-25 ms; rank 0 printed
              "entering the barrier" at 23:19:27 (step 150); at 23:20:27-28 rank 0 raised
              "Timed out waiting 60000ms for recv operation to complete" (in the barrier) and
              rank 1 "Application timeout caused pair closure" (in backward); torchrun exit 1
              after 77 s in all.  With --timeout 15 the same, 15 s after the onset (30 s run).
    --no-cause: exit 0, 300 steps (wall 18.1 -> 35.1 ms median: the host load rose mid-run)
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


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


def save_checkpoint(model, opt, step, directory):
    torch.save(
        {"step": step, "model": model.module.state_dict(), "optimizer": opt.state_dict()},
        os.path.join(directory, f"step{step}.pt"),
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--onset", type=int, default=150, help="the step that saves a checkpoint")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--no-cause", action="store_true", help="every rank calls the barrier")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
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
    with tempfile.TemporaryDirectory() as checkpoints:
        for step, (x, y) in enumerate(loader):
            if step == args.steps:
                break
            start, start_cpu = time.perf_counter(), time.process_time()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step == args.onset:
                if rank == 0:
                    save_checkpoint(model, opt, step, checkpoints)
                    print(
                        f"[rank 0] step {step}: checkpoint saved, entering the barrier at {time.strftime('%H:%M:%S')}",
                        file=sys.stderr,
                        flush=True,
                    )
                    dist.barrier()  # BUG: only rank 0 gets here
                elif args.no_cause:
                    dist.barrier()
            clock.add(step, time.perf_counter() - start, time.process_time() - start_cpu)
    clock.summary()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
