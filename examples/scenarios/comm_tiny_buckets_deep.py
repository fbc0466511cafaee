# expect-verdict: communication
# expect-rule: CM001
# expect-first-fix: bucket_cap_mb
"""Cause: a deep stack of small layers (192 x Linear(64, 64) + LayerNorm) with a tiny
``bucket_cap_mb=0.01``: every parameter tensor gets its own bucket, so each step issues
hundreds of all-reduces of a few KB each. Each one pays the collective's latency; the
bandwidth is irrelevant. The fix is larger buckets (fewer, bigger all-reduces).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/comm_tiny_buckets_deep.py
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        return x + torch.relu(self.norm(self.fc(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--depth", type=int, default=192)
    p.add_argument("--bucket-cap-mb", type=float, default=0.01)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[Block(64) for _ in range(args.depth)], torch.nn.Linear(64, 10))
    model = DDP(net, bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=16, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()        # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
