"""A DDP job (gloo, CPU) that trains to its end and then has one rank abort in the interpreter's teardown, after
its program ended: an object kept in a module global calls os.abort() when the interpreter destroys it (as torch's
C++ objects do when a process group's threads outlive Python, pytorch/pytorch#190489).

    torchrun --nproc_per_node=2 tests/scripts/teardown_abort.py [--steps 12] [--abort-rank 1]
"""

import argparse
import os
import sys
import types

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class AbortsInTeardown:
    def __del__(self):
        os.abort()  # SIGABRT, as std::terminate does


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--abort-rank", type=int, default=1)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DDP(torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        loss = model(torch.randn(16, 64)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()
    if int(os.environ.get("RANK", 0)) == args.abort_rank:
        # held by a module of its own: the interpreter destroys it after the program (and every atexit handler) ended
        holder = types.ModuleType("_aborts_in_teardown")
        holder.bomb = AbortsInTeardown()
        sys.modules[holder.__name__] = holder


if __name__ == "__main__":
    main()
