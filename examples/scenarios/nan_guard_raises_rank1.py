# expect-verdict: failure
# expect-rule: FL010
# expect-first-fix: -
"""Cause: one record of the sensor export is corrupt: sample 199 has an ``inf`` reading
(an overflowed float in the upstream conversion). With ``DistributedSampler(shuffle=False)``
and batch size 16 it lands in rank 1's batch at step 6, where the forward pass turns it into
a non-finite loss. The training loop has a guard, ``if not torch.isfinite(loss): raise
FloatingPointError(...)``, so rank 1 raises and exits; rank 0's loss is finite, it goes on
into the backward pass and its gradient all-reduce waits for a peer that is gone (connection
closed / reset, or the process-group timeout). Rank 0's error is a symptom; the root cause
is rank 1's ``FloatingPointError``.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times and
losses as they happen; ``--clean-data`` (ablation) drops non-finite records when loading,
and the 30 steps complete.
Observed (torch 2.13 CPU, this host; whole run ~9 s, steps ~6-16 ms): both ranks log steps
0-5 with finite losses, then

    [rank1]: FloatingPointError: rank 1: non-finite loss nan at step 6
    [rank0]: RuntimeError: [.../gloo/transport/tcp/pair.cc:553] Connection closed by peer
             [127.0.0.1]:11653. This is typically caused by a remote worker crashing. ...

rank 0's error raised from ``loss.backward()`` (the gradient all-reduce) of step 6. With
``--clean-data`` both ranks finish 30 steps.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/nan_guard_raises_rank1.py --report
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
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

CORRUPT_INDEX = 199


def load_sensor_export(n=2048, channels=48, clean=False):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, channels)).astype(np.float32)
    y = (x[:, :4].sum(axis=1) > 0).astype(np.int64)
    x[CORRUPT_INDEX, 17] = np.float32("inf")  # overflowed reading in the export
    if clean:
        keep = np.isfinite(x).all(axis=1)
        x, y = x[keep], y[keep]
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--clean-data", action="store_true", help="ablation: drop non-finite records")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(48, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 2)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = load_sensor_export(clean=args.clean_data)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=16, sampler=sampler, drop_last=True)
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"rank {rank}: non-finite loss {loss.item()} at step {step}")
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            if args.report:
                print(f"rank {rank} step {step} ms {1000 * (now - t_last):.1f} loss {loss.item():.4f}", flush=True)
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
