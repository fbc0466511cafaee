# expect-verdict: compute
# expect-rule: category:compute
# expect-first-fix: float32
"""Cause: the features come from a float64 numpy array (``np.random`` / a pandas-style
export defaults to float64) wrapped with ``torch.from_numpy``; the first run failed with
"mat1 and mat2 must have the same dtype", and the author "fixed" it with ``model.double()``.
The whole MLP now trains in float64: every matmul of the forward and backward passes runs at
about half the float32 speed on this CPU, and the gradients DDP all-reduces are 2x the bytes.
The model is kept small (~0.2 M parameters) with a large batch (1024) so that the matmuls, not the
all-reduce, are the step.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's per-step times and the
median step; ``--float32`` (ablation) casts the data to float32 once
(``torch.from_numpy(x).float()``) and leaves the model in float32.
Measured on the 2-core host (median step, steps 5-39; host shared with other jobs; the
batches are sliced from the in-memory tensors): float64 48 / 48 ms (rank 0 / rank 1),
``--float32`` 27 / 28 ms; a second pair of runs 48 / 47 vs 24 / 24 ms: ~21-24 ms of each
step (~1.9x) is the float64 arithmetic. (A first version with per-sample collate measured
54 vs 29 ms.)

    torchrun --standalone --nproc_per_node=2 examples/scenarios/float64_model_from_numpy.py
"""

import argparse
import datetime
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset


def load_features(n=16384, d=96, classes=4, seed=0):
    """Stands in for ``df[feature_cols].to_numpy()``: numpy gives float64."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))  # float64
    w = rng.standard_normal((d, classes))
    y = (x @ w).argmax(axis=1)
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--float32", action="store_true", help="ablation: cast the data to float32, keep the model float")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    x_np, y_np = load_features()
    x = torch.from_numpy(x_np)
    if args.float32:
        x = x.float()
    y = torch.from_numpy(y_np)
    net = nn.Sequential(
        nn.Linear(96, 256), nn.ReLU(),
        nn.Linear(256, 256), nn.ReLU(),
        nn.Linear(256, 256), nn.ReLU(),
        nn.Linear(256, 4),
    )
    if not args.float32:
        net = net.double()  # "fixes" the dtype mismatch with the float64 features
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data)
    # whole batches are sliced out of the in-memory tensors (no per-sample collate)
    loader = DataLoader(data, sampler=BatchSampler(sampler, 1024, drop_last=True), batch_size=None)
    step, times = 0, []
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
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
        print(f"rank {rank} dtype={next(model.parameters()).dtype} median step ms {1000 * steady:.1f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
