# expect-verdict: imbalance
# expect-rule: IM001
# expect-first-fix: -
"""Cause: sensor data pre-split into per-rank CSV files (``rank0/part-000.csv`` …), each
file one batch of 64 windows. Every window is summarised from its raw rows (mean and max
over the rows of 24 channels) before the model sees it, so the model input is the same
shape on both ranks. But rank 1's files come from sensors sampled twice as fast: 32 rows
per window instead of 16, i.e. 2x the CSV text to read and parse per batch. Parsing runs in
the training process (``num_workers=0``), so rank 1 is slower every step and rank 0 waits
for it at the gradient all-reduce.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and the time
each rank spent reading and parsing; ``--equal`` gives rank 1 16 rows per window too
(ablation).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/per_rank_file_shards_unequal.py --report
"""

import argparse
import csv
import datetime
import os
import random
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

CHANNELS = 24
WINDOWS_PER_FILE = 64


def write_shard(folder, rank, rows_per_window, files=12):
    rng = random.Random(rank)
    os.makedirs(os.path.join(folder, f"rank{rank}"), exist_ok=True)
    paths = []
    for f in range(files):
        path = os.path.join(folder, f"rank{rank}", f"part-{f:03d}.csv")
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            for win in range(WINDOWS_PER_FILE):
                label = rng.randrange(10)
                for _ in range(rows_per_window):
                    w.writerow([win, label] + [f"{rng.gauss(label / 10, 1.0):.5f}" for _ in range(CHANNELS)])
        paths.append(path)
    return paths


class CsvBatches(Dataset):
    """One item = one file = one batch of windows."""

    def __init__(self, paths):
        self.paths = paths
        self.parse_s = 0.0

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        t0 = time.perf_counter()
        rows = {}
        labels = {}
        with open(self.paths[i], newline="", encoding="utf-8") as fh:
            for rec in csv.reader(fh):
                win = int(rec[0])
                labels[win] = int(rec[1])
                rows.setdefault(win, []).append([float(v) for v in rec[2:]])
        wins = sorted(rows)
        x = torch.stack([torch.cat([t.mean(0), t.amax(0)]) for t in (torch.tensor(rows[w]) for w in wins)])
        y = torch.tensor([labels[w] for w in wins])
        self.parse_s += time.perf_counter() - t0
        return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--equal", action="store_true")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Unflatten(1, (1, 2 * CHANNELS)),
                                    torch.nn.Conv1d(1, 32, 3, padding=1), torch.nn.ReLU(),
                                    torch.nn.Conv1d(32, 32, 3, padding=1), torch.nn.ReLU(),
                                    torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rows_per_window = 16 if rank == 0 or args.equal else 32
    with tempfile.TemporaryDirectory(prefix=f"shards_r{rank}_") as folder:
        data = CsvBatches(write_shard(folder, rank, rows_per_window))
        loader = DataLoader(data, batch_size=None, shuffle=True, num_workers=0,
                            generator=torch.Generator().manual_seed(rank))
        times = []
        step = 0
        t_last = time.perf_counter()
        for epoch in range(1000):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                now = time.perf_counter()
                times.append(now - t_last)
                t_last = now
                if step >= args.steps:
                    break
            if step >= args.steps:
                break
    if args.report:
        print(f"rank {rank} ({rows_per_window} rows/window) step ms: " + " ".join(f"{1000 * t:.0f}" for t in times)
              + f"; parse ms/step {1000 * data.parse_s / step:.0f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
