"""A tiny CPU DDP job (gloo, 2 ranks) for the live failure cases of the log/hang diagnosis tests.

Usage: torchrun --nproc_per_node=2 THIS --mode MODE    with MODE one of
  plain     train 8 steps and end normally (run it with GLOO_SOCKET_IFNAME=eth9: init fails on every rank)
  evaluate  rank 0 runs a long evaluation (no collectives) after step 3 while rank 1 goes on to its
            next all-reduce and times out there (process-group timeout 5 s)
  exit3     both ranks end with sys.exit(3) after step 2
  sigkill   rank 1 kills itself with SIGKILL after step 2
  sigkill_all  every rank kills itself with SIGKILL after step 2 (as a scheduler's kill -9 of the job)
Without --mode the argument parser exits with a usage error (exit code 2) on every rank.
Progress lines are printed as "step N loss X".
"""

import argparse
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

EVAL_SECONDS = 14.0


def evaluate(model) -> float:
    """A long evaluation on one rank only (the bug): no collectives while the peer waits."""
    t_end = time.time() + EVAL_SECONDS
    total = 0.0
    with torch.no_grad():
        while time.time() < t_end:
            total += float(model.module(torch.randn(4, 32)).sum())
            time.sleep(0.05)
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True, choices=["plain", "evaluate", "exit3", "sigkill", "sigkill_all"])
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(8):
        loss = model(torch.randn(8, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step == 2 and args.mode == "exit3":
            sys.exit(3)
        if step == 2 and args.mode == "sigkill" and rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == 2 and args.mode == "sigkill_all":
            dist.barrier()  # both ranks at the same point, then each dies at once
            os.kill(os.getpid(), signal.SIGKILL)
        if step == 3 and args.mode == "evaluate" and rank == 0:
            print(f"eval {evaluate(model):.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
