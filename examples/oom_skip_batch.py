"""A DDP job that dies because one rank "handles" an out-of-memory error.

Rank 1 hits an OOM on one batch (simulated on CPU by raising the error CUDA would raise),
catches it like much real code does ("skip this batch") and moves on. That rank now runs
one all-reduce fewer than the others: the ranks drift out of step, and when rank 1 has
finished its batches rank 0 is still waiting in a gradient all-reduce that nobody will
join, and fails there. torchrun then names rank 0 as the first failure; the cause is
rank 1's OOM.

    torchrun --nproc_per_node=2 examples/oom_skip_batch.py [--steps 10] [--oom-step 4]
"""

import argparse
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--oom-rank", type=int, default=1)
    p.add_argument("--oom-step", type=int, default=4)
    args = p.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(2048, 128), torch.randint(0, 10, (2048,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler, drop_last=True)
    sampler.set_epoch(0)
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        try:
            if rank == args.oom_rank and step == args.oom_step:
                # what torch raises when the caching allocator cannot serve a request
                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB "
                    "of which 1.05 GiB is free. Of the allocated memory 75.20 GiB is allocated by PyTorch")
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        except torch.OutOfMemoryError as e:
            print(f"rank {rank}: OOM at step {step}, skipping this batch ({str(e)[:40]}...)", flush=True)
            opt.zero_grad()
            continue
    print(f"rank {rank}: finished {args.steps} batches", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
