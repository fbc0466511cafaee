# expect-verdict: communication
# expect-rule: category:communication
# expect-first-fix: requires_grad
"""Cause: fine-tuning a classification head on top of a "frozen" pretrained encoder, where the
encoder was frozen only by leaving its parameters out of the optimizer
(``AdamW(model.module.head.parameters())``). Its parameters still have ``requires_grad=True``,
so autograd computes their gradients and DDP registers all of them in its buckets: every step
all-reduces ~6.3 M gradient values (25 MB) that the optimizer then ignores, for a head of 5 K
parameters. On this host the exposed all-reduce dominates the step. The fix is to freeze the
encoder with ``requires_grad_(False)`` *before* wrapping the model in DDP (DDP then only
synchronises the head), or to run the encoder under ``torch.no_grad()``.

Both ranks do the same work (not imbalance), data is an in-memory tensor (not dataloader),
and the step is mostly the gradient all-reduce (see ``--no-comm``): communication-bound.

Source: DDP notes / forum answers "DDP all-reduces every parameter with requires_grad=True,
even if it is not in the optimizer" (PyTorch forums "Freezing layers with DDP"), and the
transfer-learning tutorial, which freezes with ``requires_grad = False``.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank median step time and the
median backward time (where DDP's all-reduce runs); ``--no-comm`` runs the same job inside
``model.no_sync()`` (gradients computed, not all-reduced) to show what the all-reduce costs;
``--fixed`` (ablation) freezes the encoder with ``requires_grad_(False)`` before DDP.
Measured on 2026-11-28 (torch 2.13.0+cpu, 2-core host shared with ~7 other helpers, load average
~15): median step 212.4 / 213.4 ms (rank 0 / rank 1), backward 185.6 / 182.2 ms;
``--no-comm`` 80.0 / 81.3 ms (backward 57.8 / 57.7 ms: the all-reduce costs ~130 ms of the
step); ``--fixed`` 37.4 / 38.5 ms (backward 14.1 / 16.2 ms): 5.6x. Default run 39 s wall.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/b5_frozen_backbone_grads_synced.py --report
"""

import argparse
import contextlib
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class FineTuneModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(),
                                     nn.Linear(2048, 512), nn.LayerNorm(512))   # "pretrained"
        self.head = nn.Linear(512, 10)

    def forward(self, x):
        return self.head(self.encoder(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--report", action="store_true")
    p.add_argument("--fixed", action="store_true", help="ablation: encoder.requires_grad_(False) before DDP")
    p.add_argument("--no-comm", action="store_true", help="measurement: skip the all-reduce (no_sync)")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = FineTuneModel()
    if args.fixed:
        net.encoder.requires_grad_(False)
    model = DDP(net)
    opt = torch.optim.AdamW(model.module.head.parameters(), lr=1e-3)   # only the head is trained
    n = 8192
    data = TensorDataset(torch.randn(n, 512), torch.randint(0, 10, (n,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=4, sampler=sampler, drop_last=True)
    step_ms, bwd_ms = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            with model.no_sync() if args.no_comm else contextlib.nullcontext():
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                t0 = time.perf_counter()
                loss.backward()
                bwd_ms.append(1000 * (time.perf_counter() - t0))
            opt.step()
            now = time.perf_counter()
            step_ms.append(1000 * (now - t_last))
            t_last = now
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        synced = sum(p.numel() for p in model.parameters() if p.requires_grad)
        print(f"rank {rank}: {synced / 1e6:.2f} M gradient values synced; median step "
              f"{statistics.median(step_ms[5:]):.1f} ms, median backward {statistics.median(bwd_ms[5:]):.1f} ms",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
