# expect-verdict: compute
# expect-rule: category:compute
# expect-first-fix: detect_anomaly
"""Cause: ``torch.autograd.set_detect_anomaly(True)`` was left on from a debugging session
(hunting a NaN). Anomaly mode records a formatted Python traceback (``traceback.format_stack``)
for every autograd node created in the forward pass and checks every gradient for NaN in the
backward pass, so a small residual MLP for tabular data (40 LayerNorm/Linear/GELU blocks of
width 32, ~45 K parameters, batch 32 sliced from in-memory tensors) whose step is many small
ops runs several times slower. Nothing else is wrong: balanced ranks, DistributedSampler with
set_epoch, small gradients, plain SGD.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's per-step times and
the median step; ``--no-anomaly`` (ablation) leaves anomaly mode off.
Measured on the 2-core host (median step, steps 5-39; host shared with other jobs):
anomaly mode on 61 / 60 ms (rank 0 / rank 1), ``--no-anomaly`` 18 / 19 ms; a second pair of
runs 50 / 49 ms vs 16 / 16 ms: ~3.2x, i.e. ~35-43 ms of each step is anomaly mode's
bookkeeping. (In one process without DDP, the same kind of model: 42 ms vs 6-9 ms; cProfile
puts the time in ``traceback.format_stack``/``linecache``.) A first version (width 64,
AdamW, per-sample collate) measured 69 vs 28 ms.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/anomaly_detection_left_on.py
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset


class ResidualBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + 0.5 * F.gelu(self.fc(self.norm(x)))


class TabularResNet(nn.Module):
    def __init__(self, features=64, width=32, depth=40, classes=5):
        super().__init__()
        self.inp = nn.Linear(features, width)
        self.blocks = nn.Sequential(*[ResidualBlock(width) for _ in range(depth)])
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--no-anomaly", action="store_true", help="ablation: leave anomaly mode off")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    if not args.no_anomaly:
        torch.autograd.set_detect_anomaly(True)  # left on from last week's NaN hunt
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(TabularResNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(8192, 64, generator=g), torch.randint(0, 5, (8192,), generator=g))
    sampler = DistributedSampler(data)
    # whole batches are sliced out of the in-memory tensors (no per-sample collate)
    loader = DataLoader(data, sampler=BatchSampler(sampler, 32, drop_last=True), batch_size=None)
    step, times = 0, []
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            times.append(now - t_last)
            if args.report:
                print(f"rank {rank} step {step} ms {1000 * (now - t_last):.1f}", flush=True)
            t_last = now
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        steady = sorted(times[5:])[len(times[5:]) // 2]
        print(f"rank {rank} anomaly={torch.is_anomaly_enabled()} median step ms {1000 * steady:.1f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
