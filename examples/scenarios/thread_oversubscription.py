# expect-verdict: compute
# expect-rule: CP001
# expect-first-fix: thread
"""Cause: the training script calls ``torch.set_num_threads(8)`` (copied from a config tuned
for an 8-core box) on a 2-core host where torchrun starts 2 ranks: 16 intra-op threads
compete for 2 cores. Each convolution is split into 8 chunks whose threads are descheduled
and spin-wait on each other, so the compute-bound step (a CNN on 64x64 images) runs slower
than with one thread per rank. Nothing else is wrong: no data, communication or imbalance
cause.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times;
``--threads 1`` is the ablation (one thread per rank: 2 threads on 2 cores).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/thread_oversubscription.py --report
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
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = TensorDataset(torch.randn(1024, 3, 64, 64), torch.randint(0, 10, (1024,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler, drop_last=True)
    times = []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
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
        print(f"rank {rank} threads {torch.get_num_threads()} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times),
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
