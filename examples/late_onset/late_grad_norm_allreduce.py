# expect-incident: slowdown at step >= 150 on rank any
# expect-verdict: communication
# expect-first-fix: log_grad_norms
"""Late slowdown in communication: after warm-up (step ``--onset``) a monitoring hook starts
logging the global gradient norm of every parameter. ``log_grad_norms`` computes each
parameter's local squared norm and ``dist.all_reduce``s it on its own: one tiny blocking
collective per parameter tensor (66 for this MLP of 16 Linear+LayerNorm blocks) every step,
on top of DDP's bucketed gradient all-reduce. Each costs a gloo round trip, so every rank's
step gains pure communication latency; the compute is unchanged.

Imitates per-parameter gradient statistics reduced one tensor at a time (forum threads about
many small ``all_reduce`` calls being slow; the DDP design notes on why gradients are
bucketed: small collectives are latency-bound). Fix: stack the norms into one tensor and
all-reduce once (or log every N steps, or only locally).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/late_grad_norm_allreduce.py
    torchrun ... late_grad_norm_allreduce.py --no-cause     # no norm logging: healthy
    torchrun ... late_grad_norm_allreduce.py --fixed        # one stacked all_reduce

Measured 2026-11-28 23:09-23:28 UTC on the shared 2-core host (load average 7-9 from
other jobs, so wall times swing by up to ~50 % between runs; the per-rank CPU time of a
step is steadier), at commit 67172fa with this file added,
plain ``torchrun --standalone --nproc_per_node=2``, under ``nice -n 10``, medians of
steps 20..onset-1 (before) and onset+5..end (after):

    cause:    wall 27.2 -> 52.1 ms on both ranks; CPU 6.8 -> 16.9 ms (rank 0), 6.7 -> 15.6 ms
    --no-cause: wall 20.0 -> 34.8 ms (host load rose), CPU 7.0 -> 7.4 ms
    --fixed (one run, load ~9): wall 23.5 -> 27.4 ms
    an earlier cause run with --batch 64 at lower load: wall 4.2 -> 24.7 ms
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


def log_grad_norms(model):
    """Global L2 norm of each parameter's gradient, reduced one parameter at a time."""
    norms = {}
    for name, param in model.named_parameters():
        squared = param.grad.pow(2).sum()
        dist.all_reduce(squared)
        norms[name] = squared.sqrt().item()
    return norms


def log_grad_norms_stacked(model):
    """The same numbers with a single all_reduce."""
    names = [name for name, _ in model.named_parameters()]
    squared = torch.stack([p.grad.pow(2).sum() for p in model.parameters()])
    dist.all_reduce(squared)
    return dict(zip(names, squared.sqrt().tolist()))


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
    p.add_argument("--batch", type=int, default=192)
    p.add_argument("--blocks", type=int, default=16)
    p.add_argument("--no-cause", action="store_true", help="no gradient-norm logging")
    p.add_argument("--fixed", action="store_true", help="the fix: one stacked all_reduce")
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
    layers = []
    for _ in range(args.blocks):
        layers += [torch.nn.Linear(128, 128), torch.nn.LayerNorm(128), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(128, 10))
    model = DDP(torch.nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = StepClock(rank, args.onset)
    for step, (x, y) in enumerate(loader):
        if step == args.steps:
            break
        start, start_cpu = time.perf_counter(), time.process_time()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if step >= args.onset and not args.no_cause:
            if args.fixed:
                log_grad_norms_stacked(model)
            else:
                log_grad_norms(model)
        opt.step()
        clock.add(step, time.perf_counter() - start, time.process_time() - start_cpu)
    clock.summary()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
