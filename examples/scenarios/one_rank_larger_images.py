# expect-verdict: imbalance
# expect-rule: IM001
# expect-first-fix: its data
# expect-absent: CF001
"""Cause: identical inputs to the model on every rank (3x64x64 crops), but one rank's data
is larger: rank 1's shard holds 256x256 source images (a newer camera), rank 0's 64x64. Both
are decoded and resized to 64x64 in ``__getitem__`` (num_workers=0), so rank 1 spends far
longer per batch in its DataLoader and rank 0 waits for it at every all-reduce.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/one_rank_larger_images.py
"""

import argparse
import zlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

OUT = 64


class ImageShard(Dataset):
    def __init__(self, side, n=256, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.side = side
        self.blobs = [zlib.compress(torch.randint(0, 32, (3, side, side), generator=g).to(torch.uint8)
                                    .add_(torch.arange(side, dtype=torch.uint8) // 2).numpy().tobytes(), 6)
                      for _ in range(n)]

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        s = self.side
        img = torch.frombuffer(bytearray(zlib.decompress(self.blobs[i])), dtype=torch.uint8).reshape(3, s, s)
        img = F.interpolate(img[None].float() / 255, size=(OUT, OUT), mode="bilinear", antialias=True)[0]
        return (img - 0.5) / 0.25, i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    shard = ImageShard(side=256 if rank == 1 else 64, seed=rank)       # each rank reads its own shard
    loader = DataLoader(shard, batch_size=16, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(rank))
    step = 0
    for epoch in range(1000):
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
