# expect-verdict: imbalance
# expect-rule: category:imbalance
# expect-first-fix: batch
"""Cause: a per-rank configuration bug. The launcher config has one entry per rank (it was
written for a heterogeneous cluster), and rank 1's ``batch_size`` is 64 where rank 0's is
32. Same model, same ``DistributedSampler`` (each rank gets half the samples), so rank 1
computes ~2x the forward/backward work per step and rank 0 waits for it in every gradient
all-reduce. The epochs end at different steps (rank 1 has half as many batches per epoch)
but both ranks run the same number of optimizer steps, so nothing hangs: it is only slow.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's per-step times, its
batch size, its forward time (purely local compute) and its backward time (which contains the
gradient all-reduce, and so the wait for the other rank), and their medians;
``--same-batch`` (ablation) gives rank 1 rank 0's batch size.
Measured on the 2-core host (medians, steps 5-39; batches sliced from in-memory tensors;
host shared with other jobs): with the bug, step 96 / 99 ms (rank 0 / rank 1), forward
16 ms (batch 32) vs 30 ms (batch 64), backward+all-reduce 78 ms on rank 0 vs 63 ms on rank 1:
rank 0, with half the work, spends longer in the backward because it waits for rank 1.
``--same-batch``: step 56 / 56 ms, forward 13 / 10 ms, backward 41 / 44 ms. Other pairs of
runs: 89 vs 64 ms and 108 vs 95 ms (the shared host's load moves the numbers; the forward
ratio, 1.7-3x in five runs, stays well above 1).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/rank1_double_batch_config.py
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

# per-rank settings, copied from the cluster config (rank 1 was a bigger machine once)
RANK_CONFIG = {
    0: {"batch_size": 32, "log_every": 10},
    1: {"batch_size": 64, "log_every": 10},
}


class SignalNet(nn.Module):
    def __init__(self, c=48, classes=6):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(3, c, 7, padding=3), nn.ReLU(),
            nn.Conv1d(c, c, 5, padding=2), nn.ReLU(),
            nn.Conv1d(c, c, 5, padding=2), nn.ReLU(),
            nn.Conv1d(c, c, 5, padding=2), nn.ReLU(),
        )
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--same-batch", action="store_true", help="ablation: every rank uses rank 0's batch size")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    cfg = RANK_CONFIG[0 if args.same_batch else rank]
    torch.manual_seed(0)
    model = DDP(SignalNet())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(8192, 3, 256, generator=g), torch.randint(0, 6, (8192,), generator=g))
    sampler = DistributedSampler(data)
    # whole batches are sliced out of the in-memory tensors (no per-sample collate)
    loader = DataLoader(data, sampler=BatchSampler(sampler, cfg["batch_size"], drop_last=True), batch_size=None)
    step, times, fwd, bwd = 0, [], [], []
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            fwd.append(time.perf_counter() - t0)
            opt.zero_grad()
            t1 = time.perf_counter()
            loss.backward()  # includes the gradient all-reduce, and so the wait for the other rank
            bwd.append(time.perf_counter() - t1)
            opt.step()
            now = time.perf_counter()
            times.append(now - t_last)
            if args.report:
                print(f"rank {rank} step {step} batch {len(x)} ms {1000 * (now - t_last):.1f} "
                      f"forward ms {1000 * fwd[-1]:.1f} backward+all-reduce ms {1000 * bwd[-1]:.1f}", flush=True)
            t_last = now
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        med = lambda v: sorted(v[5:])[len(v[5:]) // 2]
        print(f"rank {rank} batch {cfg['batch_size']} median step ms {1000 * med(times):.1f} "
              f"median forward ms {1000 * med(fwd):.1f} median backward+all-reduce ms {1000 * med(bwd):.1f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
