# expect-verdict: imbalance
# expect-rule: category:imbalance
# expect-first-fix: evaluate
"""Cause: rank 0 runs a validation pass (``evaluate``: 4 batches of 128 under no_grad) after
every optimizer step, the others do not. They wait for rank 0 at the next all-reduce.

The extra-work-on-one-rank finding comes from the `verdict` branch; the header names the
category and the substring the first fix must contain (the function rank 0 spends time in).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/rank0_eval_every_step.py
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


@torch.no_grad()
def evaluate(model, batches):
    model.eval()
    correct = total = 0
    for x, y in batches:
        correct += (model.module(x).argmax(1) == y).sum().item()
        total += len(y)
    model.train()
    return correct / total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                              torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    val = [(torch.randn(128, 256), torch.randint(0, 10, (128,))) for _ in range(4)]
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if dist.get_rank() == 0:
                evaluate(model, val)
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()        # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
