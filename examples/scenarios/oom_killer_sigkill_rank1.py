# expect-verdict: failure
# expect-rule: FL008
# expect-first-fix: -
"""Cause: rank 1 is killed by the kernel at step 8, as the Linux OOM killer does when a process
grows past the host's (or the container's cgroup's) memory: the process gets SIGKILL, so it
prints no Python traceback at all, and torchrun reports ``exitcode: -9`` / ``Signal 9 (SIGKILL)``
for it. Here rank 1 caches every batch's activations in a list (a real leak pattern: keeping
tensors "for logging"), and once its cache passes a budget it sends itself SIGKILL, standing in
for the OOM killer (this host has too much memory to reach the real limit in seconds). Rank 0
is in the gradient all-reduce when its peer disappears; its "connection closed" error is a
symptom.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times and rank 1's
cached MiB as they happen, then torchrun's ``exitcode: -9`` for rank 1; ``--no-leak`` stops
caching activations, so the budget is never reached (ablation: the run completes).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/oom_killer_sigkill_rank1.py --report
"""

import argparse
import datetime
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

BUDGET_MIB = 256  # stands in for the memory limit of rank 1's cgroup


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--no-leak", action="store_true", help="ablation: do not keep activations")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024),
            torch.nn.ReLU(),
            torch.nn.Linear(1024, 10),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    kept = []  # "for logging later": never cleared
    t_last = time.perf_counter()
    for step in range(args.steps):
        x = torch.randn(256, 1024, generator=g)
        y = torch.randint(0, 10, (256,), generator=g)
        hidden = model.module[:4](x)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 1 and not args.no_leak:
            kept.append(hidden.detach().clone().repeat(32, 1))  # ~32 MiB per step
        cached_mib = sum(t.numel() * t.element_size() for t in kept) / 2**20
        now = time.perf_counter()
        if args.report:
            print(f"rank {rank} step {step} ms {1000 * (now - t_last):.0f} cached MiB {cached_mib:.0f}", flush=True)
        t_last = now
        if cached_mib > BUDGET_MIB:
            os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does
    if args.report:
        print(f"rank {rank} finished {args.steps} steps", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
