# expect-verdict: imbalance
# expect-rule: IM001
# expect-first-fix: even out the work
# expect-absent: CF001
"""Cause: uneven sequence lengths per rank. The corpus is sorted by length (to pad less) and
split into contiguous per-rank blocks, so rank 1 gets the long documents (~4x the tokens of
rank 0's). Rank 1's forward/backward takes longer every step and rank 0 waits for it at the
all-reduce. Batches are padded to the longest sequence in the batch.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/uneven_seq_lengths.py
"""

import argparse
import random

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

VOCAB = 1000


class Documents(Dataset):
    def __init__(self, lengths):
        rnd = random.Random(0)
        self.docs = [[rnd.randrange(1, VOCAB) for _ in range(n)] for n in lengths]

    def __len__(self):
        return len(self.docs)

    def __getitem__(self, i):
        return torch.tensor(self.docs[i]), len(self.docs[i]) % 2


def pad_collate(batch):
    seqs, labels = zip(*batch)
    return torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True), torch.tensor(labels)


class Encoder(torch.nn.Module):
    def __init__(self, d=128):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, d)
        self.conv1 = torch.nn.Conv1d(d, d, 5, padding=2)
        self.conv2 = torch.nn.Conv1d(d, d, 5, padding=2)
        self.head = torch.nn.Linear(d, 2)

    def forward(self, tokens):
        h = self.emb(tokens).transpose(1, 2)
        h = torch.relu(self.conv2(torch.relu(self.conv1(h))))
        return self.head(h.mean(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rnd = random.Random(1)
    lengths = sorted(rnd.choice([64, 96, 128, 384, 512, 640]) for _ in range(512))   # sorted to pad less
    block = len(lengths) // world
    shard = lengths[rank * block:(rank + 1) * block]                                   # contiguous split
    torch.manual_seed(0)
    model = DDP(Encoder())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Documents(shard), batch_size=16, shuffle=True, collate_fn=pad_collate, drop_last=True,
                        generator=torch.Generator().manual_seed(rank))
    step = 0
    for epoch in range(1000):
        for tokens, y in loader:
            loss = F.cross_entropy(model(tokens), y)
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
