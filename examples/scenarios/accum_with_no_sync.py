# expect-verdict: compute
# expect-rule: CP001
# expect-first-fix: -
"""Healthy: gradient accumulation over 8 micro-batches done right. The first 7 backward
passes run under ``model.no_sync()``, so DDP all-reduces the gradients once per optimizer
step; the step is spent computing (a small 1-D convolutional network, 11 K parameters, 8
micro-batches of 96 signals). Nothing to fix (any compute fix is acceptable).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/accum_with_no_sync.py
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
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 256)),             # each sample: a 256-point signal
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=96, sampler=sampler, drop_last=True)
    step, micro = 0, 0
    opt.zero_grad()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            micro += 1
            last = micro % args.accumulate == 0
            ctx = model.no_sync() if not last else contextlib.nullcontext()
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
