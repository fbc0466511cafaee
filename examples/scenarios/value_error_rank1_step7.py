# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: ValueError
"""Cause: a corrupt record in rank 1's shard. Samples are stored as comma-separated text
lines and parsed with ``float()`` in ``__getitem__`` (``num_workers=0``); one line in
rank 1's 7th batch has a field that reads ``#N/A`` (a spreadsheet export), so
rank 1 raises ``ValueError: could not convert string to float: '#N/A'`` at step 7 and dies.
Rank 0 then fails in its step-7 gradient all-reduce because its peer is gone.

Verify (plain torchrun, no ddpdoctor): rank 1 prints the ValueError traceback (from
``parse_line``), rank 0 a gloo connection error; ``--clean`` (ablation) trains normally.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/value_error_rank1_step7.py
"""

import argparse
import datetime
import random

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

BATCH = 32
FEATURES = 128


def parse_line(line):
    label, _, rest = line.partition(":")
    return torch.tensor([float(v) for v in rest.split(",")]), int(label)


class TextShard(Dataset):
    def __init__(self, rank, n=1024, corrupt=True):
        rng = random.Random(rank)
        self.lines = [f"{rng.randrange(10)}:" + ",".join(f"{rng.gauss(0, 1):.4f}" for _ in range(FEATURES))
                      for _ in range(n)]
        if corrupt and rank == 1:
            bad = 6 * BATCH + 11                                # in the 7th batch (sequential order)
            fields = self.lines[bad].split(",")
            fields[17] = "#N/A"
            self.lines[bad] = ",".join(fields)

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, i):
        return parse_line(self.lines[i])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--clean", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Unflatten(1, (1, FEATURES)),
                                    torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                                    torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TextShard(rank, corrupt=not args.clean), batch_size=BATCH, shuffle=False, drop_last=True)
    step = 0
    for epoch in range(1000):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            print(f"rank {rank}: step {step} loss {loss.item():.3f}", flush=True)
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
