# expect-verdict: imbalance
# expect-rule: category:imbalance
# expect-first-fix: token
"""Cause: the same batch size on every rank, but rank 1's sequences are 6x longer. The corpus
was pre-split into per-rank shards by source (``shard_{rank}``): rank 0's shard is short chat
turns padded to 64 tokens, rank 1's is documents padded to 384. Each rank reads only its own
shard (no DistributedSampler), with batches of 16 sequences on both ranks, so rank 1's batch
is [16, 384] token ids against [16, 64] on rank 0: ~6x the tokens, and its 1-D convolutional
encoder computes ~6x as long while rank 0 waits in every gradient all-reduce.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's input shape and its
median forward and step times; ``--same-length`` (ablation) pads every shard to 64 tokens.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/rank1_longer_sequences.py
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

SHARD_LENGTH = {0: 64, 1: 384}  # tokens each shard is padded to
VOCAB = 2000


class ConvEncoder(nn.Module):
    def __init__(self, dim=64, classes=4):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.convs = nn.Sequential(
            nn.Conv1d(dim, dim, 5, padding=2), nn.ReLU(),
            nn.Conv1d(dim, dim, 5, padding=2), nn.ReLU(),
            nn.Conv1d(dim, dim, 5, padding=2), nn.ReLU(),
        )
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        x = self.embed(ids).transpose(1, 2)  # [batch, dim, length]
        return self.head(self.convs(x).mean(dim=-1))


def load_shard(rank, length, rows=2048):
    g = torch.Generator().manual_seed(100 + rank)
    return TensorDataset(torch.randint(1, VOCAB, (rows, length), generator=g), torch.randint(0, 4, (rows,), generator=g))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--same-length", action="store_true", help="ablation: every shard padded to 64 tokens")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(ConvEncoder())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = load_shard(rank, SHARD_LENGTH[0 if args.same_length else rank])
    loader = DataLoader(data, batch_size=16, shuffle=True, drop_last=True)
    step, fwd, steps = 0, [], []
    t_last = time.perf_counter()
    while step < args.steps:
        for ids, y in loader:
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(ids), y)
            fwd.append(time.perf_counter() - t0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            steps.append(now - t_last)
            t_last = now
            step += 1
            if step >= args.steps:
                break
    if args.report:
        med = lambda v: 1000 * sorted(v[5:])[len(v[5:]) // 2]
        print(f"rank {rank} inputs {list(ids.shape)} median ms: forward {med(fwd):.1f} step {med(steps):.1f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
