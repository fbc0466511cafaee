# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: world_size
"""Cause: the script was written for a 4-GPU machine and its ``init_process_group`` call
hard-codes ``world_size=4`` (copied from the training config) while taking the rank from the
launcher's ``RANK``. Launched with ``--nproc_per_node=2``, the two processes join the
rendezvous and wait for ranks 2 and 3, which never come; after the 15 s process-group
timeout ``init_process_group`` raises on both ranks, before any step.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints what each rank was told by the
launcher (``WORLD_SIZE``) and what it asks for; ``--world-size-from-env`` (ablation) passes
``world_size=int(os.environ["WORLD_SIZE"])`` and the job trains its 30 steps.
Observed (torch 2.13 CPU, this host; whole run ~23 s): both ranks print "launcher
WORLD_SIZE=2, init_process_group(world_size=4)", then after 15.0 s each raises, from
``ProcessGroupGloo(...)`` inside ``init_process_group``:

    torch.distributed.DistStoreError: wait timeout after 15000ms, keys: /default_pg/0//cpu//0/2

(the key of rank 2's gloo address, which nobody publishes). With ``--world-size-from-env``
``init_process_group`` returns in 0.1 s and the 30 steps complete.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/hardcoded_world_size_4.py
"""

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

CONFIG = {"world_size": 4, "batch_size": 64, "lr": 0.05}  # from the 4-GPU node's config


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--world-size-from-env", action="store_true", help="ablation: take world_size from the launcher")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"]) if args.world_size_from_env else CONFIG["world_size"]
    if args.report:
        print(f"rank {rank}: launcher WORLD_SIZE={os.environ['WORLD_SIZE']}, init_process_group(world_size={world_size})",
              flush=True)
    t0 = time.perf_counter()
    try:
        dist.init_process_group(
            "gloo",
            init_method="env://",
            world_size=world_size,
            rank=rank,
            timeout=datetime.timedelta(seconds=15),
        )
    finally:
        if args.report:
            print(f"rank {rank}: init_process_group returned or raised after {time.perf_counter() - t0:.1f} s", flush=True)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"])
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(8192, 64, generator=g), torch.randint(0, 10, (8192,), generator=g))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=CONFIG["batch_size"], sampler=sampler, drop_last=True)
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            if args.report:
                print(f"rank {rank} step {step} ms {1000 * (now - t_last):.1f}", flush=True)
            t_last = now
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
