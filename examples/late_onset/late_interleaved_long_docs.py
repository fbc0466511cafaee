# expect-incident: straggler at step >= 150 on rank 1
# expect-verdict: imbalance
# expect-first-fix: shuffle
"""Late straggler from data that changes under a strided sampler. The training set interleaves
two sources item by item: even indices are short captions (48 tokens), odd indices come from
an article corpus whose first shards hold abstracts (48 tokens) and whose later shards hold
full articles (144 tokens). ``DistributedSampler(shuffle=False)`` deals index ``i`` to rank
``i % 2``, so rank 0 only ever sees captions and rank 1 only articles: the ranks are balanced
until step ``--onset``, when rank 1's batches become 3x longer. Each batch is padded to its
longest sequence; rank 1's forward/backward cost grows ~3x and rank 0 waits in all-reduce.

Imitates the DistributedSampler documentation (``shuffle=True`` by default, ``set_epoch``)
and the forum/issue reports of multi-source datasets whose order lines up with the sampler's
stride, giving each rank one source (and, with variable-length text, unequal step times).
Fixes: ``shuffle=True`` (with ``set_epoch``), or length-bucketed batches built across ranks.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/late_interleaved_long_docs.py
    torchrun ... late_interleaved_long_docs.py --no-cause     # the articles stay short: healthy

Measured 2026-11-28 23:09-23:28 UTC on the shared 2-core host (load average 7-9 from
other jobs, so wall times swing by up to ~50 % between runs; the per-rank CPU time of a
step is steadier), at commit 67172fa with this file added,
plain ``torchrun --standalone --nproc_per_node=2``, under ``nice -n 10``, medians of
steps 20..onset-1 (before) and onset+5..end (after):

    cause:    wall 32.3 -> 89.0 ms (rank 0), 32.7 -> 88.0 ms (rank 1); CPU rank 1 11.6 -> 26.7 ms,
              rank 0 10.4 -> 11.5 ms (rank 0 only waits)
    --no-cause: wall 52.1 -> 32.6 ms (host load fell), CPU 12.8 -> 11.6 ms (rank 0),
              10.7 -> 10.4 ms (rank 1)
"""

import argparse
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

VOCAB = 2000
CLASSES = 8


class InterleavedSources(Dataset):
    """Item i: caption number i // 2 if i is even, article number i // 2 if i is odd."""

    def __init__(self, length, short_tokens, long_tokens, first_long_article):
        self.length = length
        self.short_tokens, self.long_tokens = short_tokens, long_tokens
        self.first_long_article = first_long_article

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        article = index % 2 == 1
        tokens = self.short_tokens
        if article and index // 2 >= self.first_long_article:
            tokens = self.long_tokens
        g = torch.Generator().manual_seed(index)
        return torch.randint(0, VOCAB, (tokens,), generator=g), index % CLASSES


def pad_collate(batch):
    longest = max(len(ids) for ids, _ in batch)
    padded = torch.zeros(len(batch), longest, dtype=torch.long)
    for row, (ids, _) in enumerate(batch):
        padded[row, : len(ids)] = ids
    return padded, torch.tensor([label for _, label in batch])


class ConvTextClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 64)
        self.conv1 = torch.nn.Conv1d(64, 128, 5, padding=2)
        self.conv2 = torch.nn.Conv1d(128, 128, 5, padding=2)
        self.head = torch.nn.Linear(128, CLASSES)

    def forward(self, ids):
        h = self.embed(ids).transpose(1, 2)
        h = F.relu(self.conv2(F.relu(self.conv1(h))))
        return self.head(h.mean(dim=2))


class StepClock:
    """Per-step wall and CPU (this process) times; medians every ``every`` steps to stderr."""

    def __init__(self, rank, onset, every=20):
        self.rank, self.onset, self.every = rank, onset, every
        self.wall, self.cpu = [], []

    def add(self, step, wall_seconds, cpu_seconds):
        self.wall.append(wall_seconds)
        self.cpu.append(cpu_seconds)
        if (step + 1) % self.every == 0:
            wall, cpu = self.wall[-self.every :], self.cpu[-self.every :]
            print(
                f"[rank {self.rank}] steps {step + 1 - self.every}-{step}: "
                f"median {statistics.median(wall) * 1e3:.1f} ms (cpu {statistics.median(cpu) * 1e3:.1f}), "
                f"max {max(wall) * 1e3:.1f} ms",
                file=sys.stderr,
                flush=True,
            )

    def summary(self):
        def describe(times):
            return (
                f"median {statistics.median(times) * 1e3:.1f} ms "
                f"(mean {statistics.mean(times) * 1e3:.1f}, max {max(times) * 1e3:.1f})"
            )

        first, last = slice(20, self.onset), slice(self.onset + 5, None)
        if self.wall[first] and self.wall[last]:
            print(
                f"[rank {self.rank}] SUMMARY wall before onset {describe(self.wall[first])}; "
                f"after {describe(self.wall[last])} | cpu before "
                f"{statistics.median(self.cpu[first]) * 1e3:.1f} ms, "
                f"after {statistics.median(self.cpu[last]) * 1e3:.1f} ms",
                file=sys.stderr,
                flush=True,
            )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--onset", type=int, default=150)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--short-tokens", type=int, default=48)
    p.add_argument("--long-tokens", type=int, default=144)
    p.add_argument("--no-cause", action="store_true", help="the articles stay short")
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    long_tokens = args.short_tokens if args.no_cause else args.long_tokens
    # the article corpus: per rank-1 step, `batch` articles are consumed
    dataset = InterleavedSources(
        args.steps * args.batch * world, args.short_tokens, long_tokens, args.onset * args.batch
    )
    sampler = DistributedSampler(dataset, shuffle=False)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=0, collate_fn=pad_collate)
    model = DDP(ConvTextClassifier())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = StepClock(rank, args.onset)
    batches = iter(loader)
    for step in range(args.steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        ids, y = next(batches)
        loss = F.cross_entropy(model(ids), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        clock.add(step, time.perf_counter() - start, time.process_time() - start_cpu)
    clock.summary()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
