# expect-verdict: dataloader
# expect-rule: DL001
# expect-first-fix: num_workers
"""Cause: every sample is its own CSV file on disk (a temp dir stands in for a dataset
folder) and ``__getitem__`` opens, reads and parses it in Python, in the training process
(num_workers=0). Per-sample file I/O and text parsing stall every step; the model is small
(33 K parameters), so its all-reduce is not a second cause.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/dl_per_sample_files.py
"""

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

FEATURES = 1024


class CsvFolder(Dataset):
    def __init__(self, folder):
        self.files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".csv"))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], encoding="utf-8") as fh:
            label, *values = fh.read().split(",")
        return torch.tensor([float(v) for v in values]), int(label)


def write_dataset(folder, n=512):
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        row = torch.randn(FEATURES, generator=g).tolist()
        with open(os.path.join(folder, f"{i:05d}.csv"), "w", encoding="utf-8") as fh:
            fh.write(str(i % 10) + "," + ",".join(f"{v:.6f}" for v in row))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=96)
    p.add_argument("--workers", type=int, default=0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix=f"csv_rank{dist.get_rank()}_") as folder:
        write_dataset(folder)            # each rank its own copy: no shared temp dir to coordinate
        model = DDP(torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        data = CsvFolder(folder)
        sampler = DistributedSampler(data, shuffle=True)
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                            drop_last=True)
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
