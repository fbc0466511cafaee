# expect-verdict: compute
# expect-rule: category:compute
# expect-first-fix: -
"""Cause: a multi-label tagging job logs a running micro-F1 and computes it every step with a
hand-written metric, ``batch_f1_counts``, that walks the (batch x labels) prediction and
target tensors element by element in nested Python loops (``probs[i, j] > 0.5`` and
``targets[i, j]`` on 0-d tensors, then ``bool()``): 128 x 24 = 3,072 elements, each a handful
of tiny tensor ops dispatched from Python. The model (a 2-layer MLP, ~36 K parameters) takes a
few ms; the metric takes several times that, on both ranks, inside the training step. So the
step is bound by host-side CPU work in the loop (compute), not by data loading (the batch is
an in-memory tensor), communication (one 144 KB all-reduce) or imbalance (both ranks do the
same). The fix is to compute the counts with tensor ops on the whole batch (``(probs > 0.5) &
targets`` then ``.sum()``), or only every N steps.

Source: PyTorch performance tuning guide, "avoid unnecessary ... synchronizations" /
``.item()`` and per-element Python work in the loop; PyTorch forums threads on slow
per-element metric loops ("indexing tensors element-wise is slow, vectorize").

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank median step time and the
median time in the metric; ``--fixed`` (ablation) computes the same counts vectorised (the
counts are identical; checked with an assert on the first step).
Measured on 2026-11-28 (torch 2.13.0+cpu, 2-core host shared with ~7 other helpers, load average
~13.5): median step 139.7 / 142.0 ms (rank 0 / rank 1), metric 113.4 / 113.2 ms;
``--fixed`` 11.1 / 10.3 ms, metric 0.1 ms: 13x. Default run 34 s wall.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/b5_multilabel_f1_python_loop.py --report
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

N_LABELS = 24


def batch_f1_counts(probs, targets):
    tp = fp = fn = 0
    for i in range(probs.shape[0]):
        for j in range(probs.shape[1]):
            predicted = bool(probs[i, j] > 0.5)
            actual = bool(targets[i, j])
            if predicted and actual:
                tp += 1
            elif predicted:
                fp += 1
            elif actual:
                fn += 1
    return tp, fp, fn


def batch_f1_counts_vectorised(probs, targets):
    pred, act = probs > 0.5, targets.bool()
    return int((pred & act).sum()), int((pred & ~act).sum()), int((~pred & act).sum())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--report", action="store_true")
    p.add_argument("--fixed", action="store_true", help="ablation: vectorised metric")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, N_LABELS)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    n = 16384
    x_all = torch.randn(n, 256)
    y_all = (x_all[:, :N_LABELS] + 0.5 * torch.randn(n, N_LABELS) > 0.8).float()
    data = TensorDataset(x_all, y_all)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=128, sampler=sampler, drop_last=True)
    metric = batch_f1_counts_vectorised if args.fixed else batch_f1_counts
    tp = fp = fn = 0
    step_ms, metric_ms = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            logits = model(x)
            loss = F.binary_cross_entropy_with_logits(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            t0 = time.perf_counter()
            probs = torch.sigmoid(logits.detach())
            counts = metric(probs, y)
            if step == 0:
                assert counts == batch_f1_counts_vectorised(probs, y)
            tp, fp, fn = tp + counts[0], fp + counts[1], fn + counts[2]
            now = time.perf_counter()
            metric_ms.append(1000 * (now - t0))
            step_ms.append(1000 * (now - t_last))
            t_last = now
            step += 1
            if rank == 0 and step % 10 == 0:
                f1 = 2 * tp / max(1, 2 * tp + fp + fn)
                print(f"step {step} loss {loss.item():.4f} micro-F1 {f1:.3f}", flush=True)
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank}: median step {statistics.median(step_ms[5:]):.1f} ms, "
              f"median metric {statistics.median(metric_ms[5:]):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
