# expect-verdict: dataloader
# expect-rule: category:dataloader
# expect-first-fix: Dataset
"""Cause: the DataLoader hands out raw text and the training loop tokenizes it, in Python,
before the forward pass (character n-gram hashing into a bag-of-features vector). This input
work runs outside the DataLoader, so no worker can hide it and the profiler sees no operator. The
model is small (66 K parameters), so its all-reduce is not a second cause.

The rule for input work in the loop is added by the `verdict` branch (its id is not known
here): the header names the expected category and a substring of its first fix (move the
preprocessing into the Dataset / collate_fn so DataLoader workers run it).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/input_prep_in_loop.py
"""

import argparse
import random
import zlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

BUCKETS = 2048
WORDS = ["loss", "grad", "rank", "tensor", "bucket", "shard", "epoch", "batch", "kernel", "device", "stream"]


class Reviews(Dataset):
    def __init__(self, n=1024):
        rnd = random.Random(0)
        self.texts = [" ".join(rnd.choice(WORDS) for _ in range(120)) for _ in range(n)]
        self.labels = [rnd.randrange(2) for _ in range(n)]

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return self.texts[i], self.labels[i]


def featurize(texts):
    """Hash character trigrams of every text into a normalized bag-of-features vector."""
    out = torch.zeros(len(texts), BUCKETS)
    for row, text in enumerate(texts):
        counts = [0] * BUCKETS
        for j in range(len(text) - 2):
            counts[zlib.crc32(text[j:j + 3].encode()) % BUCKETS] += 1
        v = torch.tensor(counts, dtype=torch.float32)
        out[row] = v / v.norm()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=96)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(BUCKETS, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = Reviews()
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for texts, y in loader:
            x = featurize(texts)                 # input work in the loop, after the DataLoader
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
