"""The PyTorch DDP tutorial's pattern: the script starts its ranks itself and each calls
``init_process_group("gloo", rank=rank, world_size=2)`` with MASTER_ADDR/MASTER_PORT set here.
Rank 1 runs a slow pure-Python function (``slow_feature_hash``) every step, so rank 0 waits for it in the
gradient all-reduce: one rank late, the other waiting (imbalance on rank 1).

    python tutorial_spawn.py [--how spawn|start_processes|process] [--steps 40] [--port P]
        [--no-join] [--rejoin-after N --port2 P] [--exit-code N] [--hold-s S]
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def slow_feature_hash(n):
    """The slow step: pure Python, on rank 1 only."""
    h = 0
    for i in range(n):
        h = (h * 31 + i) % 1_000_003
    return h


def train(rank, world_size, args):
    if args.no_join:  # a job whose processes never join a process group
        time.sleep(0.2)
        return
    torch.set_num_threads(1)  # one intra-op thread per rank, as torchrun's OMP_NUM_THREADS=1 gives its ranks
    init = getattr(args, "init_method", None)  # None: env:// (MASTER_ADDR / MASTER_PORT)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for step in range(args.steps):
        if rank == 1:
            slow_feature_hash(args.work)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step + 1 == args.rejoin_after:  # a second phase in a new process group (the DDP model is rebuilt)
            dist.barrier()
            dist.destroy_process_group()
            # a store of its own: rank 0's first store may outlive its group, and a peer would meet it there
            os.environ["MASTER_PORT"] = args.port2
            dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
            model = DDP(model.module)  # the same parameters: the same optimizer steps them
        if args.hold_s:
            time.sleep(args.hold_s)
        if rank == 0 and step == 0:
            print(f"rank {rank}: first step done", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if args.exit_code and rank == 1:
        sys.exit(args.exit_code)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--how", choices=("spawn", "start_processes", "process"), default="spawn")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--work", type=int, default=300_000)
    p.add_argument("--port", default="29517")
    p.add_argument("--no-join", action="store_true")
    p.add_argument("--rejoin-after", type=int, default=0)
    p.add_argument("--port2", default="29518", help="the second group's MASTER_PORT (--rejoin-after)")
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--hold-s", type=float, default=0.0)
    args = p.parse_args()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = args.port
    world_size = 2
    if args.how == "spawn":
        mp.spawn(train, args=(world_size, args), nprocs=world_size, join=True)
    elif args.how == "start_processes":
        mp.start_processes(train, args=(world_size, args), nprocs=world_size, start_method="spawn")
    else:  # plain multiprocessing.Process (fork on Linux before Python 3.14)
        procs = [mp.Process(target=train, args=(r, world_size, args)) for r in range(world_size)]
        for q in procs:
            q.start()
        for q in procs:
            q.join()
        code = next((q.exitcode for q in procs if q.exitcode), 0)
        sys.exit(code)


if __name__ == "__main__":
    main()
