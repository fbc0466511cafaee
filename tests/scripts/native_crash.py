"""A DDP job (gloo, CPU) whose rank 1 dies of a native crash (SIGSEGV: a read of address 0 through ctypes, as a
broken extension would) inside a function of the script at step 3, while rank 0 waits for it in the next
all-reduce: no Python traceback, only the signal.

    torchrun --nproc_per_node=2 tests/scripts/native_crash.py [--crash-step 3]
"""

import argparse
import ctypes
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def decode_record(step: int) -> bytes:
    return ctypes.string_at(0xFFFF800000000000, 8)  # the native crash: a kernel-space address, never mapped


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--crash-step", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DDP(torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        if dist.get_rank() == 1 and step == args.crash_step:
            decode_record(step)
        loss = model(torch.randn(16, 64)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
