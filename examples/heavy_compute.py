"""A DDP job bound by compute: a wide MLP on a fast in-memory dataset. The step is mostly
forward/backward; the loader and the gradient all-reduce are small next to it.

    torchrun --nproc_per_node=2 examples/heavy_compute.py [--steps 20]
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=256)
    args = p.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)                    # two ranks share the CPU cores
    # few parameters (fast all-reduce), many FLOPs per parameter: a deep narrow net on a big batch
    layers = []
    for _ in range(16):
        layers += [torch.nn.Linear(384, 384), torch.nn.GELU()]
    model = DDP(torch.nn.Sequential(*layers, torch.nn.Linear(384, 10)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(16384, 384), torch.randint(0, 10, (16384,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y) + 1e-3 * (out ** 2).mean()
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
