# expect-verdict: dataloader
# expect-rule: DL001
# expect-first-fix: -
"""Cause: heavy per-sample CPU augmentation in ``__getitem__`` (random affine warp with
``grid_sample``, two separable blurs, colour jitter, random erasing on 3x96x96 images),
already spread over ``num_workers=2`` per rank. With 2 ranks that is 4 worker processes
plus 2 training processes on a 2-core host: the workers cannot produce batches as fast as
the small CNN consumes them, and the training loop waits on the DataLoader. More workers
cannot help here (the cores are saturated); cheaper augmentation, fewer augmentations per
sample, or pre-augmented data would.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and the time
each step waited in ``next(loader)``; ``--light`` replaces the augmentation with a plain
normalize (ablation).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/cpu_augment_workers_saturated.py --report
"""

import argparse
import datetime
import math
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

SIDE = 96


class AugmentedImages(Dataset):
    def __init__(self, n=2048, light=False):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (64, 3, SIDE, SIDE), generator=g, dtype=torch.uint8)
        self.n, self.light = n, light
        k = torch.tensor([1.0, 6.0, 15.0, 20.0, 15.0, 6.0, 1.0])
        self.blur = k / k.sum()

    def __len__(self):
        return self.n

    def _blur(self, img):
        k = self.blur
        img = F.conv2d(img[:, None], k.view(1, 1, 1, 7), padding=(0, 3))
        return F.conv2d(img, k.view(1, 1, 7, 1), padding=(3, 0))[:, 0]

    def __getitem__(self, i):
        img = self.images[i % 64].float() / 255
        if not self.light:
            angle = (torch.rand(1).item() - 0.5) * math.pi / 6
            scale = 0.9 + 0.2 * torch.rand(1).item()
            theta = torch.tensor([[math.cos(angle) * scale, -math.sin(angle) * scale, 0.1 * (torch.rand(1).item() - 0.5)],
                                  [math.sin(angle) * scale, math.cos(angle) * scale, 0.1 * (torch.rand(1).item() - 0.5)]])
            grid = F.affine_grid(theta[None], (1, 3, SIDE, SIDE), align_corners=False)
            img = F.grid_sample(img[None], grid, mode="bicubic", padding_mode="reflection", align_corners=False)[0]
            img = self._blur(self._blur(img))
            img = img * (0.8 + 0.4 * torch.rand(3, 1, 1)) + 0.1 * (torch.rand(3, 1, 1) - 0.5)
            gray = img.mean(0, keepdim=True)
            img = gray + (img - gray) * (0.7 + 0.6 * torch.rand(1))                          # saturation
            top, left = torch.randint(0, SIDE - 24, (2,)).tolist()
            img[:, top:top + 24, left:left + 24] = torch.rand(3, 1, 1)                      # random erasing
        return (img - 0.5) / 0.25, i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--light", action="store_true")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = AugmentedImages(light=args.light)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler, num_workers=args.workers, drop_last=True,
                        persistent_workers=args.workers > 0)
    times, waits = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            now = time.perf_counter()
            times.append(now - t_last)
            t_last = now
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        print(f"rank {rank} loader wait ms: " + " ".join(f"{1000 * t:.0f}" for t in waits), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
