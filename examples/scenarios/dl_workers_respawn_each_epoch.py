# expect-verdict: dataloader
# expect-rule: DL001
# expect-first-fix: persistent_workers
"""Cause: a small dataset (2 steps per epoch per rank) loaded with ``num_workers=2`` but
``persistent_workers=False``: at the start of every epoch the DataLoader shuts its worker
processes down and starts new ones, and the first batch of the epoch waits for them to start
and produce it (here ~every other step). The fix is to keep workers alive between epochs.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/dl_workers_respawn_each_epoch.py
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Spectrograms(Dataset):
    """Audio clips kept in memory; each item is a log-mel-like spectrogram computed on the fly."""

    def __init__(self, n=256):
        g = torch.Generator().manual_seed(0)
        self.clips = torch.randn(n, 4000, generator=g)
        self.window = torch.hann_window(256)

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, i):
        spec = torch.stft(self.clips[i], 256, hop_length=128, window=self.window, return_complex=True).abs()
        return torch.log1p(spec[:64]), i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv1d(64, 64, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Spectrograms()
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, num_workers=2, drop_last=True,
                        persistent_workers=False)
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
