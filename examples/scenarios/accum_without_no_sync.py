# expect-verdict: communication
# expect-rule: category:communication
# expect-first-fix: no_sync
"""Cause: gradient accumulation over 8 micro-batches per optimizer step, written as a plain
loop of ``loss.backward()`` calls without ``model.no_sync()``: DDP all-reduces all gradients
after every micro-batch, 8x the all-reduces the step needs (only the last one matters).

The finding for accumulation without no_sync() is added by the `verdict` branch (its id is
not known here): the header names the expected category and the substring of its first fix.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/accum_without_no_sync.py
"""

import argparse
import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--accumulate", type=int, default=8)
    p.add_argument("--no-sync", action="store_true", help="the fix: skip the all-reduce of the first N-1 micro-batches")
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                              torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=16, sampler=sampler, drop_last=True)
    step, micro = 0, 0
    opt.zero_grad()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            micro += 1
            last = micro % args.accumulate == 0
            ctx = model.no_sync() if args.no_sync and not last else contextlib.nullcontext()
            with ctx:
                loss = F.cross_entropy(model(x), y) / args.accumulate
                loss.backward()
            if last:
                opt.step()
                opt.zero_grad()
                step += 1
                if step >= args.steps:
                    break
        if step >= args.steps:
            break
    dist.barrier()        # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
