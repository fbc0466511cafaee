# expect-verdict: imbalance
# expect-rule: IM001
# expect-first-fix: -
"""Cause: each rank reads its own shard file (``shard_{rank}``), with no DistributedSampler, and
tokenizes raw text in ``__getitem__`` with a pure-Python greedy longest-match tokenizer,
``num_workers=0``. The shards were split by source: rank 0 got short chat messages (~150
characters), rank 1 got long documents (~4000 characters). Every sample is truncated to the
same 64 tokens, so the model step is identical on both ranks, but rank 1 tokenizes the whole
document first and spends far longer in ``next(loader)``. Rank 0 then waits for rank 1 in the
gradient all-reduce every step: one rank is late, the other waits.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times, time in
``next(loader)`` (the tokenizer) and time in ``backward`` (which holds the gradient all-reduce,
where the early rank waits); ``--balanced`` gives both ranks texts of the same length mix
(ablation).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/tokenizer_rank1_long_texts.py --report
"""

import argparse
import datetime
import random
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

SEQ = 64
ALPHABET = "abcdefghijklmnopqrstuvwxyz "


def build_vocab(seed=0, size=3000):
    rnd = random.Random(seed)
    vocab = {c: i + 1 for i, c in enumerate(ALPHABET)}
    while len(vocab) < size:
        piece = "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(2, 5)))
        vocab.setdefault(piece, len(vocab) + 1)
    return vocab


class GreedyTokenizer:
    """Longest-match-first subword tokenizer, written in plain Python (as many repos ship one)."""

    def __init__(self, vocab):
        self.vocab = vocab
        self.max_piece = max(len(k) for k in vocab)

    def encode(self, text):
        ids, i = [], 0
        while i < len(text):
            for L in range(min(self.max_piece, len(text) - i), 0, -1):
                tok = self.vocab.get(text[i : i + L])
                if tok is not None:
                    ids.append(tok)
                    i += L
                    break
            else:
                i += 1
        return ids


class TextShard(Dataset):
    def __init__(self, texts, tokenizer):
        self.texts, self.tok = texts, tokenizer

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        ids = self.tok.encode(self.texts[i])[:SEQ]  # tokenize everything, keep 64 tokens
        ids = ids + [0] * (SEQ - len(ids))
        return torch.tensor(ids), len(self.texts[i]) % 5


def make_shard(rank, balanced, n=512):
    rnd = random.Random(100 + rank)
    short_len, long_len = 150, 4000
    lens = []
    for j in range(n):
        if balanced:
            lens.append(short_len if j % 2 else long_len)
        else:
            lens.append(long_len if rank == 1 else short_len)
    return ["".join(rnd.choice(ALPHABET) for _ in range(L)) for L in lens]


class Classifier(torch.nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size + 1, 64)
        self.enc = torch.nn.TransformerEncoderLayer(64, 4, 256, batch_first=True)
        self.head = torch.nn.Linear(64, 5)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)).mean(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--balanced", action="store_true", help="ablation: same text-length mix on every rank")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    vocab = build_vocab()
    model = DDP(Classifier(len(vocab)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TextShard(make_shard(rank, args.balanced), GreedyTokenizer(vocab))
    loader = DataLoader(data, batch_size=16, shuffle=True, num_workers=0, drop_last=True)
    times, waits, bwd = [], [], []
    step = 0
    t_last = time.perf_counter()
    while step < args.steps:
        it = iter(loader)
        while step < args.steps:
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            t1 = time.perf_counter()
            loss.backward()
            bwd.append(time.perf_counter() - t1)
            opt.step()
            step += 1
            now = time.perf_counter()
            times.append(now - t_last)
            t_last = now
    if args.report:
        ms = lambda v: " ".join(f"{1000 * t:.0f}" for t in v)  # noqa: E731
        avg = lambda v: 1000 * sorted(v)[len(v) // 2]  # median, ms  # noqa: E731
        print(f"rank {rank} step ms: {ms(times)}", flush=True)
        print(f"rank {rank} loader (tokenizer) ms: {ms(waits)}", flush=True)
        print(
            f"rank {rank} median step {avg(times):.1f} ms, median loader {avg(waits):.1f} ms, "
            f"median backward+allreduce {avg(bwd):.1f} ms",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
