"""A DDP job dominated by communication: a model with many parameters (~12.6 M, 50 MB of
gradients) but a tiny batch, so every step all-reduces far more bytes than it computes.
All gradients share one 100 MB bucket, so the all-reduce starts only when backward ends
and nothing hides it.

    torchrun --nproc_per_node=2 examples/comm_heavy.py [--steps 20]
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--bucket-cap-mb", type=float, default=100.0)
    args = p.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, args.width)]
    for _ in range(args.layers):
        layers += [torch.nn.ReLU(), torch.nn.Linear(args.width, args.width)]
    # one 100 MB bucket: the whole all-reduce starts after backward, nothing overlaps it
    model = DDP(torch.nn.Sequential(*layers, torch.nn.Linear(args.width, 10)), bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(1024, 64), torch.randint(0, 10, (1024,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=2, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if dist.get_rank() == 0:
        print(f"done: {step} steps, last loss {loss.item():.3f}")
    dist.barrier()        # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
