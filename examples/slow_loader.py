"""A DDP job whose DataLoader is the bottleneck: every item takes 1.5 ms to "decode" and
the loader runs in the training process (num_workers=0), so each step waits ~25 ms for
data while the model needs a few ms.

    torchrun --nproc_per_node=2 examples/slow_loader.py [--steps 20] [--workers 0]
    ddpdoctor run -- torchrun --nproc_per_node=2 examples/slow_loader.py
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class SlowImages(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.0015)                      # JPEG decode + augmentation, in Python
        return torch.randn(128), i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (the fix: 4 or more)")
    args = p.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = SlowImages()
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers, drop_last=True,
                        persistent_workers=args.workers > 0)
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
