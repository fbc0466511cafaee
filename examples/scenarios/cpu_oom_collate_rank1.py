# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: memory
"""Cause: token sequences are stored in a packed shard (one flat token buffer plus an index
of ``(offset, length)`` records, as written by a preprocessing job). One index record is
corrupt: sample 175 claims a length of 10^11 tokens (a garbled ``uint64`` field). The
``collate_fn`` pads each batch to the longest length it has seen so far (a ratchet, so that
the batch shapes stop changing), allocating the padded batch with ``torch.zeros(batch,
max_len)`` from the *declared* lengths. With ``DistributedSampler(shuffle=False)`` and batch
size 16, sample 175 lands in rank 1's batch at step 5: the collate asks the CPU allocator for
16 x 10^11 int64 (12.8 TB) and rank 1 dies with ``DefaultCPUAllocator: can't allocate
memory``. Rank 0 is already in step 5's gradient all-reduce and loses its peer (its error is
a symptom).

Safety: this relies on the kernel refusing the allocation (``vm.overcommit_memory`` 0, the
default heuristic, or 2). With overcommit mode 1 ("always") the allocation could succeed and
zeroing it would invoke the OOM killer, so the script refuses to run in that mode.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times and the
padded batch shape as they happen; ``--validate-index`` (ablation) drops index records whose
declared length runs past the end of the token buffer, and the 30 steps complete.
Observed (torch 2.13 CPU, this host, overcommit mode 0, 23 GB RAM; whole run ~20 s): both
ranks run steps 0-4 (batch (16, 113..119), 35-57 ms), then, from ``PadToLongest.__call__``
inside ``next(loader)`` on rank 1:

    [rank1]: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator:
             can't allocate memory: you tried to allocate 12800000000000 bytes. Error code 12
             (Cannot allocate memory)
    [rank0]: RuntimeError: [.../gloo/transport/tcp/pair.cc:553] Connection closed by peer
             [127.0.0.1]:26496. This is typically caused by a remote worker crashing. ...

With ``--validate-index`` (the corrupt record dropped) both ranks finish 30 steps (~21-35 ms).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/cpu_oom_collate_rank1.py --report
"""

import argparse
import datetime
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

CORRUPT_INDEX = 175
VOCAB = 4000


def write_packed_shard(n=1024, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(16, 120, size=n).astype(np.uint64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.uint64)
    tokens = rng.integers(1, VOCAB, size=int(lengths.sum()), dtype=np.int64)
    labels = (tokens[offsets.astype(np.int64)] % 5).astype(np.int64)
    index = np.stack([offsets, lengths], axis=1)
    index[CORRUPT_INDEX, 1] = np.uint64(100_000_000_000)  # garbled length field
    return tokens, index, labels


class PackedTokens(Dataset):
    def __init__(self, tokens, index, labels, validate):
        keep = np.arange(len(index))
        if validate:
            keep = keep[index[:, 0] + index[:, 1] <= len(tokens)]
        self.tokens, self.index, self.labels, self.keep = tokens, index, labels, keep

    def __len__(self):
        return len(self.keep)

    def __getitem__(self, i):
        j = self.keep[i]
        off, length = (int(v) for v in self.index[j])
        return {"tokens": self.tokens[off: off + length], "length": length, "label": int(self.labels[j])}


class PadToLongest:
    """Pads to the longest declared length seen so far, so that batch shapes stop changing."""

    def __init__(self):
        self.max_len = 0

    def __call__(self, samples):
        self.max_len = max(self.max_len, max(s["length"] for s in samples))
        batch = torch.zeros(len(samples), self.max_len, dtype=torch.long)
        for row, s in zip(batch, samples):
            row[: len(s["tokens"])] = torch.from_numpy(s["tokens"])
        return batch, torch.tensor([s["label"] for s in samples])


class TextCNN(nn.Module):
    def __init__(self, dim=96, classes=5):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=0)
        self.conv1 = nn.Conv1d(dim, dim, 5, padding=2)
        self.conv2 = nn.Conv1d(dim, dim, 5, padding=2)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        h = self.embed(x).transpose(1, 2)
        h = F.relu(self.conv2(F.relu(self.conv1(h))))
        return self.head(h.amax(dim=-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--validate-index", action="store_true", help="ablation: drop index records past the buffer end")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    with open("/proc/sys/vm/overcommit_memory") as f:
        if f.read().strip() == "1":
            sys.exit("refusing to run: vm.overcommit_memory=1 would let the 12.8 TB allocation succeed")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(TextCNN())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = PackedTokens(*write_packed_shard(), validate=args.validate_index)
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=16, sampler=sampler, drop_last=True, collate_fn=PadToLongest())
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            if args.report:
                print(f"rank {rank} step {step} batch {tuple(x.shape)} ms {1000 * (now - t_last):.1f}", flush=True)
            t_last = now
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank} finished {step} steps", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
