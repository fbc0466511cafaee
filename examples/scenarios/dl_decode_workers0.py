# expect-verdict: dataloader
# expect-rule: DL001
# expect-first-fix: num_workers
"""Cause: the DataLoader runs in the training process (num_workers=0) and every sample is
decoded and augmented in ``__getitem__``: zlib-decompress a stored image, random-resized
crop, flip, colour jitter, blur, normalize. The training step then waits for each batch.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/dl_decode_workers0.py
"""

import argparse
import zlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

SIZE = 96        # stored image side
CROP = 48        # training resolution


class CompressedImages(Dataset):
    """Images stored compressed in memory, decoded per sample like JPEG files would be."""

    def __init__(self, n=512):
        g = torch.Generator().manual_seed(0)
        self.blobs = []
        for i in range(n):
            base = torch.linspace(0, 255, SIZE).repeat(3, SIZE, 1) + torch.randint(0, 16, (3, SIZE, SIZE), generator=g)
            self.blobs.append(zlib.compress(base.clamp(0, 255).to(torch.uint8).numpy().tobytes(), 6))
        self.blur = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        raw = zlib.decompress(self.blobs[i])
        img = torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(3, SIZE, SIZE).float() / 255
        top, left, side = torch.randint(0, SIZE // 4, (1,)).item(), torch.randint(0, SIZE // 4, (1,)).item(), SIZE * 3 // 4
        img = F.interpolate(img[None, :, top:top + side, left:left + side], size=(CROP, CROP), mode="bilinear",
                            align_corners=False)[0]
        if torch.rand(1).item() < 0.5:
            img = img.flip(-1)
        img = img * (0.8 + 0.4 * torch.rand(3, 1, 1)) + 0.1 * (torch.rand(3, 1, 1) - 0.5)   # colour jitter
        k = self.blur
        img = F.conv2d(img[:, None], k.view(1, 1, 1, 5), padding=(0, 2))
        img = F.conv2d(img, k.view(1, 1, 5, 1), padding=(2, 0))[:, 0]
        img = (img - 0.5) / 0.25
        return img, i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = CompressedImages()
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers, drop_last=True)
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
