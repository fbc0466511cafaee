# expect-verdict: compute
# expect-rule: category:compute
# expect-first-fix: -
"""Healthy: a control job. A keyword-spotting 1-D CNN on in-memory 1-second waveforms (8 kHz). The
Dataset does a cheap random 7,600-sample crop per item (a tensor slice, ~microseconds),
``num_workers=0``; DistributedSampler with ``set_epoch``; 13 K parameters (one 52 KB
all-reduce per step); batch 64 per rank keeps the step dominated by the convolutions. Both
ranks run the same code on the same amount of data. Expected: compute-bound, nothing to fix.

Source: the structure of the PyTorch "Speech Command Classification" tutorial (M5-style
strided 1-D convolutions), scaled down for a 2-core CPU host.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank median step time, median
``next(loader)`` time and median forward+backward time.
Measured on 2026-11-28 (torch 2.13.0+cpu, 2-core host shared with ~7 other helpers, load average
~18): median step 343.4 / 345.3 ms (rank 0 / rank 1), ``next(loader)`` 0.9 / 1.0 ms,
forward+backward 341.2 / 339.5 ms. Default run 38 s wall.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/b5_healthy_conv_audio.py --report
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

CROP = 7600


class Waveforms(Dataset):
    def __init__(self, n=4096, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.audio = torch.randn(n, 8000, generator=g)
        self.labels = torch.randint(0, 12, (n,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        start = int(torch.randint(0, 8000 - CROP + 1, ()))
        return self.audio[i, start:start + CROP].unsqueeze(0), self.labels[i]


def make_model():
    return nn.Sequential(nn.Conv1d(1, 32, 80, stride=8), nn.BatchNorm1d(32), nn.ReLU(), nn.MaxPool1d(4),
                         nn.Conv1d(32, 32, 3), nn.BatchNorm1d(32), nn.ReLU(), nn.MaxPool1d(4),
                         nn.Conv1d(32, 64, 3), nn.BatchNorm1d(64), nn.ReLU(),
                         nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(64, 12))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(make_model())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = Waveforms()
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, drop_last=True)
    step_ms, load_ms, fb_ms = [], [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        it = iter(loader)
        while step < args.steps:
            t0 = time.perf_counter()
            batch = next(it, None)
            if batch is None:
                break
            t1 = time.perf_counter()
            x, y = batch
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            now = time.perf_counter()
            load_ms.append(1000 * (t1 - t0))
            fb_ms.append(1000 * (t2 - t1))
            step_ms.append(1000 * (now - t_last))
            t_last = now
            step += 1
        if step >= args.steps:
            break
    if args.report:
        n_params = sum(q.numel() for q in model.parameters())
        print(f"rank {rank}: {n_params} parameters; median step {statistics.median(step_ms[5:]):.1f} ms, "
              f"next(loader) {statistics.median(load_ms[5:]):.1f} ms, "
              f"forward+backward {statistics.median(fb_ms[5:]):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
