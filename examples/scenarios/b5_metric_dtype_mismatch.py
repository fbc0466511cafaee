# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: dtype
"""Cause: a fraud-detection job (0.6 % positives) logs the mean loss on the fraud class
every 5 steps, averaged over ranks:

    value = np.mean(fraud_losses) if fraud_losses else 0.0
    t = torch.as_tensor(value)
    dist.all_reduce(t)

``np.mean`` returns a ``numpy.float64``, so a rank that saw fraud samples in the window builds
a float64 tensor (8 bytes), while a rank that saw none builds ``torch.as_tensor(0.0)``, a
float32 tensor (4 bytes). The two ranks enter the same all-reduce with different dtypes. In the
first window (steps 0-4, seeded data) rank 1 saw one fraud sample and rank 0 none, so at
step 5 gloo aborts: one rank dies with ``gloo::EnforceNotMet ... op.preamble.length <=
op.nbytes. 8 vs 4. Received data size doesn't match expected size. Is there a distributed
collective mismatch in your code?`` (SIGABRT), the other with "Connection reset by peer".
The process-group timeout is 10 s in case the mismatch hangs instead. The fix is to give the
tensor an explicit dtype (``torch.tensor(float(value), dtype=torch.float32)``).

Source: gloo's size check in ``gloo/transport/tcp/pair.cc`` (the message quoted above);
``torch.as_tensor`` docs (dtype inferred from the data: numpy float64 stays float64);
PyTorch forums "all_reduce hangs/crashes with tensors of different dtypes across ranks".

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and, at each
log, the dtype each rank sends; ``--fixed`` (ablation) uses ``dtype=torch.float32`` and the
40 steps complete.
Measured on 2026-11-28 (torch 2.13.0+cpu, 2-core host shared with ~7 other helpers, load average
~16): at step 5 rank 0 had 0 fraud samples (``all_reduce dtype torch.float32``) and rank 1 had
2 (``torch.float64``); rank 0 died with SIGABRT (``terminate called after throwing an instance
of 'gloo::EnforceNotMet' ... 8 vs 4. Received data size doesn't match expected size``), rank 1
with ``RuntimeError: ... Read error ... Connection reset by peer`` in the all-reduce; 25 s wall.
``--fixed``: all logs send float32, 40 steps, median step 21.4 / 19.8 ms.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/b5_metric_dtype_mismatch.py --report
"""

import argparse
import datetime
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

LOG_EVERY = 5


def load_transactions(n=8192, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=g)
    y = (torch.rand(n, generator=g) < 0.006).long()       # 0.6 % fraud
    x[y == 1, :4] += 2.0
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--report", action="store_true")
    p.add_argument("--fixed", action="store_true", help="ablation: explicit float32 dtype")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = TensorDataset(*load_transactions())
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=32, sampler=sampler, drop_last=True)
    fraud_losses = []
    step_ms = []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            losses = F.cross_entropy(model(x), y, reduction="none")
            opt.zero_grad(set_to_none=True)
            losses.mean().backward()
            opt.step()
            fraud_losses.extend(losses.detach()[y == 1].tolist())
            now = time.perf_counter()
            step_ms.append(1000 * (now - t_last))
            if args.report:
                print(f"rank {rank} step {step} ms {step_ms[-1]:.1f}", flush=True)
            t_last = now
            step += 1
            if step % LOG_EVERY == 0:
                value = np.mean(fraud_losses) if fraud_losses else 0.0
                t = torch.tensor(float(value), dtype=torch.float32) if args.fixed else torch.as_tensor(value)
                if args.report:
                    print(f"rank {rank} step {step}: {len(fraud_losses)} fraud samples, all_reduce dtype {t.dtype}",
                          flush=True)
                dist.all_reduce(t)
                if rank == 0:
                    print(f"step {step} fraud-class loss {t.item() / world:.4f}", flush=True)
                fraud_losses.clear()
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank}: {step} steps, median step {statistics.median(step_ms[5:]):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
