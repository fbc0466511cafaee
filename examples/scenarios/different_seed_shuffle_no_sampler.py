# expect-verdict: compute
# expect-rule: CF001
# expect-first-fix: DistributedSampler
"""Cause: no DistributedSampler. Each rank builds a plain ``DataLoader(shuffle=True)`` over
the WHOLE dataset with its own seed (``generator=torch.Generator().manual_seed(1234 +
rank)``, "so the ranks see different batches"). The first batches differ between ranks,
but every rank still walks all 8192 samples each epoch: an epoch costs 2x the steps it
should, and the ranks' gradients are averaged over overlapping data. The step itself is a
healthy compute-bound 1-D CNN step.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank steps per epoch (64
with this bug, 32 with a DistributedSampler: ``--sampler`` is the ablation), how many
samples of the epoch both ranks visited, and the step times.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/different_seed_shuffle_no_sampler.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--sampler", action="store_true")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n = 8192
    data = TensorDataset(torch.randn(n, 512), torch.randint(0, 10, (n,)), torch.arange(n))
    if args.sampler:
        sampler = DistributedSampler(data, seed=1234)
        loader = DataLoader(data, batch_size=128, sampler=sampler, drop_last=True)
    else:
        sampler = None
        loader = DataLoader(data, batch_size=128, shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(1234 + rank))
    if args.report:                       # the epoch's visiting order, to count overlap (not part of training)
        seen = torch.cat([b[2] for b in loader])
        everyone = [torch.zeros_like(seen) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, seen)
        common = len(set(everyone[0].tolist()) & set(everyone[1].tolist()))
        print(f"rank {rank}: {len(loader)} steps per epoch, {len(seen)} samples, {common} visited by both ranks; "
              f"first batch starts {seen[:4].tolist()}", flush=True)
    times = []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y, _ in loader:
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
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
