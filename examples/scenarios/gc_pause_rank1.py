# expect-verdict: imbalance
# expect-rule: category:imbalance
# expect-first-fix: gc.freeze
"""Cause: rank 1 keeps per-sample provenance records for hard-example mining: every step it
adds, for each sample of its batch, a record dict holding per-feature lists that point back
to the record (reference cycles), to a cache that only grows. The cache is Python containers
the cyclic garbage collector tracks, so Python's automatic full (generation-2) collections
walk all of them: rank 1 stops for tens of ms every few steps, and rank 0 waits for it at
the next gradient all-reduce. Rank 0 keeps no such cache.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times and, on
rank 1, the time spent in automatic collections (``gc.callbacks``) per step;
``--no-cause`` turns the cache off (ablation), ``--freeze`` calls ``gc.freeze()`` after
every step's additions (the cache is still built, collections no longer walk it).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/gc_pause_rank1.py --report
"""

import argparse
import datetime
import gc
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class ProvenanceCache:
    """Per-sample records kept for later hard-example mining (never pruned: the bug)."""

    def __init__(self):
        self.records = []

    def add(self, step, indices, losses):
        for idx, loss in zip(indices.tolist(), losses.tolist()):
            rec = {"step": step, "idx": idx, "loss": loss, "features": []}
            for f in range(128):
                rec["features"].append([f, rec])            # back-reference: a reference cycle
            self.records.append(rec)


class GcTimer:
    def __init__(self):
        self.total, self._t0 = 0.0, None

    def __call__(self, phase, info):
        if info["generation"] != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            self.total += time.perf_counter() - self._t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--report", action="store_true")
    p.add_argument("--no-cause", action="store_true")
    p.add_argument("--freeze", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n = 8192
    data = TensorDataset(torch.randn(n, 512), torch.randint(0, 10, (n,)), torch.arange(n))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=256, sampler=sampler, drop_last=True)
    cache = ProvenanceCache() if rank == 1 and not args.no_cause else None
    timer = GcTimer()
    gc.callbacks.append(timer)
    times, gc_ms = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y, idx in loader:
            losses = F.cross_entropy(model(x), y, reduction="none")
            opt.zero_grad()
            losses.mean().backward()
            opt.step()
            if cache is not None:
                cache.add(step, idx, losses.detach())
                if args.freeze:
                    gc.freeze()
            step += 1
            now = time.perf_counter()
            times.append(now - t_last)
            gc_ms.append(timer.total)
            t_last = now
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        gcs = [1000 * (b - a) for a, b in zip([0.0] + gc_ms[:-1], gc_ms)]
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        print(f"rank {rank} full-gc ms per step: " + " ".join(f"{g:.0f}" for g in gcs), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
