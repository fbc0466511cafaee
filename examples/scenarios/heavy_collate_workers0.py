# expect-verdict: dataloader
# expect-rule: DL001
# expect-first-fix: num_workers
"""Cause: a hand-written ``collate_fn`` does per-token Python work (n-gram hashing, padding and
mask building in nested Python loops) for every batch, and the DataLoader runs with
``num_workers=0``. So the collate runs in the training process, inside ``next(loader)``,
before every step, and the training loop waits for it: the model step itself is short.
The dataset ``__getitem__`` is cheap (it only slices a pre-tokenized list); the cost is all
in the collate.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and the time
each step spent in ``next(loader)`` (which includes the collate); ``--fast-collate`` swaps in a
vectorized collate that produces the same tensors (ablation), and the loader wait drops.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/heavy_collate_workers0.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

VOCAB = 4096
MAX_LEN = 128
NGRAM = 6  # hashed n-gram order
HASHES = 4  # independent hash seeds, summed into one id


class TokenizedTexts(Dataset):
    """Pre-tokenized texts of varying length (lists of ints, as a tokenizer returns them)."""

    def __init__(self, n=2048):
        g = torch.Generator().manual_seed(0)
        lens = torch.randint(32, MAX_LEN, (n,), generator=g).tolist()
        self.texts = [torch.randint(1, VOCAB, (L,), generator=g).tolist() for L in lens]

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return self.texts[i], i % 4


def slow_collate(batch):
    """Per-token Python loops: n-gram hashing, padding and attention mask, one element at a time."""
    ids, masks, labels = [], [], []
    for toks, label in batch:
        row, mask = [], []
        for j in range(MAX_LEN):
            if j < len(toks):
                window = [toks[j - d] if j >= d else 0 for d in range(NGRAM - 1, -1, -1)]
                total = 0
                for seed in range(HASHES):
                    h = seed
                    for c in window:  # n-gram hash, byte by byte
                        for k in range(4):
                            h = (h * 31 + ((c >> (8 * k)) & 255)) % VOCAB
                    total += h
                row.append(total % VOCAB)
                mask.append(1.0)
            else:
                row.append(0)
                mask.append(0.0)
        ids.append(row)
        masks.append(mask)
        labels.append(label)
    return torch.tensor(ids), torch.tensor(masks), torch.tensor(labels)


def fast_collate(batch):
    """Same result, vectorized."""
    n = len(batch)
    toks = torch.zeros(n, MAX_LEN, dtype=torch.long)
    mask = torch.zeros(n, MAX_LEN)
    for r, (t, _) in enumerate(batch):
        toks[r, : len(t)] = torch.tensor(t)
        mask[r, : len(t)] = 1.0
    window = [
        torch.cat([torch.zeros(n, d, dtype=torch.long), toks[:, : MAX_LEN - d]], 1) for d in range(NGRAM - 1, -1, -1)
    ]
    total = torch.zeros_like(toks)
    for seed in range(HASHES):
        h = torch.full_like(toks, seed)
        for c in window:
            for k in range(4):
                h = (h * 31 + ((c >> (8 * k)) & 255)) % VOCAB
        total += h
    h = (total % VOCAB) * mask.long()
    return h, mask, torch.tensor([lab for _, lab in batch])


class BagClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 64)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))

    def forward(self, ids, mask):
        e = self.emb(ids) * mask.unsqueeze(-1)
        return self.mlp(e.sum(1) / mask.sum(1, keepdim=True))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--fast-collate", action="store_true", help="ablation: vectorized collate")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(BagClassifier())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = TokenizedTexts()
    sampler = DistributedSampler(data)
    loader = DataLoader(
        data,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=0,
        drop_last=True,
        collate_fn=fast_collate if args.fast_collate else slow_collate,
    )
    times, waits = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        it = iter(loader)
        while step < args.steps:
            t0 = time.perf_counter()
            try:
                ids, mask, y = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            loss = F.cross_entropy(model(ids, mask), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            now = time.perf_counter()
            times.append(now - t_last)
            t_last = now
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        print(f"rank {rank} loader wait ms (collate inside): " + " ".join(f"{1000 * t:.0f}" for t in waits), flush=True)
        print(
            f"rank {rank} mean step {1000 * sum(times) / len(times):.1f} ms, mean loader wait "
            f"{1000 * sum(waits) / len(waits):.1f} ms",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
