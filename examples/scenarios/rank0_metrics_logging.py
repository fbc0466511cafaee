# expect-verdict: imbalance
# expect-rule: category:imbalance
# expect-first-fix: log_metrics
"""Cause: rank 0 logs detailed metrics every step: for every parameter the norm, mean, std
and a 64-bin histogram of weights and gradients, converted with ``.tolist()``, serialized
with ``json.dumps`` and appended to a JSON-lines file. The other rank waits for it at the
next all-reduce.

The extra-work-on-one-rank finding comes from the `verdict` branch; the header names the
category and the substring the first fix must contain (the function rank 0 spends time in).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/rank0_metrics_logging.py
"""

import argparse
import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def log_metrics(model, loss, step, fh):
    record = {"step": step, "loss": loss.item(), "params": {}}
    for name, p in model.named_parameters():
        stats = {}
        for kind, t in (("weight", p.detach()), ("grad", p.grad)):
            stats[kind] = {"norm": t.norm().item(), "mean": t.mean().item(), "std": t.std().item(),
                           "hist": torch.histc(t, bins=64).tolist(), "sample": t.flatten()[:2048].tolist()}
        record["params"][name] = stats
    fh.write(json.dumps(record) + "\n")
    fh.flush()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    layers = []
    for _ in range(12):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers, torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, drop_last=True)
    step = 0
    with tempfile.TemporaryDirectory(prefix="metrics_") as folder, \
            open(os.path.join(folder, "metrics.jsonl"), "w", encoding="utf-8") as fh:
        for epoch in range(1000):
            sampler.set_epoch(epoch)
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                if dist.get_rank() == 0:
                    log_metrics(model, loss, step, fh)
                opt.step()
                step += 1
                if step >= args.steps:
                    break
            if step >= args.steps:
                break
    dist.barrier()        # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
