# expect-verdict: imbalance
# expect-rule: category:imbalance
# expect-first-fix: pickle
"""Cause: rank 0 snapshots the per-sample training statistics (a dict of ~60 k small dicts
with lists inside) with ``pickle.dumps`` every step, to hand them to a monitoring sidecar.
``pickle.dumps`` is C code that holds the GIL for the whole call: no Python frame of the
training script is on top while it runs, and rank 1 waits for rank 0 at the next gradient
all-reduce.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times and rank
0's time in ``pickle.dumps`` per step; ``--no-cause`` skips the snapshot (ablation).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/gil_held_pickle_rank0.py --report
"""

import argparse
import datetime
import pickle
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def build_sample_stats(n):
    return {i: {"seen": 0, "last_loss": 0.0, "losses": [0.0] * 8, "tags": ["train", f"shard-{i % 64}"]}
            for i in range(n)}


def snapshot(stats):
    return pickle.dumps(stats, protocol=pickle.HIGHEST_PROTOCOL)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--report", action="store_true")
    p.add_argument("--no-cause", action="store_true")
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
    n = 60000
    data = TensorDataset(torch.randn(n, 512), torch.randint(0, 10, (n,)), torch.arange(n))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=256, sampler=sampler, drop_last=True)
    stats = build_sample_stats(n)
    times, pickle_ms = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y, idx in loader:
            losses = F.cross_entropy(model(x), y, reduction="none")
            opt.zero_grad()
            losses.mean().backward()
            opt.step()
            for i, l in zip(idx.tolist(), losses.tolist()):
                s = stats[i]
                s["seen"] += 1
                s["last_loss"] = l
                s["losses"][s["seen"] % 8] = l
            if rank == 0 and not args.no_cause:
                t0 = time.perf_counter()
                blob = snapshot(stats)
                pickle_ms.append(1000 * (time.perf_counter() - t0))
                del blob
            step += 1
            now = time.perf_counter()
            times.append(now - t_last)
            t_last = now
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        if pickle_ms:
            print(f"rank {rank} pickle.dumps ms: " + " ".join(f"{t:.0f}" for t in pickle_ms), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
