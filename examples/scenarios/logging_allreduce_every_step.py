# expect-verdict: communication
# expect-rule: category:communication
# expect-first-fix: -
"""Cause: every step the loop averages 20 logging metrics over the ranks one by one: for
each of loss, accuracy, per-class recall, gradient norm, … a one-element tensor is
``dist.all_reduce``d and read back with ``.item()``. On a small MLP (~9 K parameters,
batch 64) whose own gradient all-reduce and compute are short, these 20 latency-bound
collectives per step dominate the step.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and the time
spent in the metric all-reduces; ``--no-cause`` logs the local values without all-reducing
them (ablation).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/logging_allreduce_every_step.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def step_metrics(model, logits, y, loss):
    pred = logits.argmax(1)
    metrics = {"loss": loss.detach(), "acc": (pred == y).float().mean(),
               "grad_norm": torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters())),
               "logit_mean": logits.detach().mean(), "logit_std": logits.detach().std()}
    for c in range(10):
        mask = y == c
        metrics[f"recall_{c}"] = (pred[mask] == c).float().mean() if mask.any() else torch.tensor(0.0)
    metrics["conf"] = logits.detach().softmax(1).max(1).values.mean()
    metrics["entropy"] = -(logits.detach().softmax(1) * logits.detach().log_softmax(1)).sum(1).mean()
    metrics["margin"] = (logits.detach().topk(2, 1).values[:, 0] - logits.detach().topk(2, 1).values[:, 1]).mean()
    metrics["weight_norm"] = torch.sqrt(sum((p.detach() ** 2).sum() for p in model.parameters()))
    metrics["batch_size"] = torch.tensor(float(y.numel()))
    return metrics


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--report", action="store_true")
    p.add_argument("--no-cause", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 24),
                                    torch.nn.ReLU(), torch.nn.Linear(24, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(8192, 64), torch.randint(0, 10, (8192,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, drop_last=True)
    times, metric_ms = [], []
    logged = {}
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            t0 = time.perf_counter()
            for name, value in step_metrics(model, logits, y, loss).items():
                t = value.detach().clone().reshape(1)
                if not args.no_cause:
                    dist.all_reduce(t)
                    t /= world
                logged[name] = t.item()
            metric_ms.append(1000 * (time.perf_counter() - t0))
            step += 1
            now = time.perf_counter()
            times.append(now - t_last)
            t_last = now
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.1f}" for t in times), flush=True)
        print(f"rank {rank} metrics ms: " + " ".join(f"{t:.1f}" for t in metric_ms), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
