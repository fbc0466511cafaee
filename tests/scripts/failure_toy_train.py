"""A tiny CPU DDP job (gloo, 2 ranks) that fails in one of three ways, for the log-analysis tests.

Usage: torchrun --nproc_per_node=2 THIS MODE    with MODE one of
  oom   rank 1 hits a (simulated) CUDA OOM at step 3, catches it and skips the batch, so it
        runs one step fewer; rank 0's last gradient all-reduce then fails when rank 1 leaves
  stop  rank 1 has fewer batches (uneven inputs): it stops after step 3 and stays alive
        without collectives, so rank 0 waits in its all-reduce until the 15 s timeout
  kill  rank 1 is killed by SIGKILL at step 3
Progress lines are printed as "step N loss X".
"""

import os
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 6
FAIL_AT = 3


def main(mode: str) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = FAIL_AT + 1 if (mode == "stop" and rank == 1) else STEPS
    for step in range(steps):
        x = torch.randn(16, 64)
        try:
            if rank == 1 and step == FAIL_AT:
                if mode == "oom":
                    raise torch.OutOfMemoryError(
                        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
                        "15.77 GiB of which 1.03 GiB is free."
                    )
                if mode == "kill":
                    os.kill(os.getpid(), 9)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        except torch.OutOfMemoryError:
            traceback.print_exc()
            print(f"rank {rank}: out of memory at step {step}, skipping this batch", file=sys.stderr, flush=True)
            continue
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(0.05)
    if mode == "stop" and rank == 1:
        time.sleep(40)  # "evaluation" without collectives: the peer waits in all-reduce
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
