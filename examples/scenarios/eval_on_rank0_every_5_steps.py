# expect-verdict: imbalance
# expect-rule: category:imbalance
# expect-first-fix: evaluate
"""Cause: rank 0 runs a validation pass (``evaluate``: 4 batches of 256 held-out signals
through the model under ``torch.no_grad()``) every 5 steps, as a "quick val" for the
progress bar; rank 1 does not, and waits for rank 0 at the next gradient all-reduce. The
cost lands on one step in five, so it shows as a periodic spike rather than a steady one.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and rank 0's
time in ``evaluate``; ``--no-cause`` skips the validation (ablation).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/eval_on_rank0_every_5_steps.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def evaluate(net, loader):
    net.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (net(x).argmax(1) == y).sum().item()
            total += y.numel()
    net.train()
    return correct / total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--eval-every", type=int, default=5)
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
    train = TensorDataset(torch.randn(8192, 512), torch.randint(0, 10, (8192,)))
    val = TensorDataset(torch.randn(1024, 512), torch.randint(0, 10, (1024,)))
    sampler = DistributedSampler(train)
    loader = DataLoader(train, batch_size=128, sampler=sampler, drop_last=True)
    val_loader = DataLoader(val, batch_size=256)
    times, eval_ms = [], []
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
            if rank == 0 and step % args.eval_every == 0 and not args.no_cause:
                t0 = time.perf_counter()
                acc = evaluate(net, val_loader)
                eval_ms.append(1000 * (time.perf_counter() - t0))
            now = time.perf_counter()
            times.append(now - t_last)
            t_last = now
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        if eval_ms:
            print(f"rank {rank} evaluate ms: " + " ".join(f"{t:.0f}" for t in eval_ms), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
