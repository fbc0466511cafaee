# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: SyncBatchNorm
"""Cause: the training script was copied from a multi-GPU recipe whose config says
``sync_bn: true``, so the model goes through ``nn.SyncBatchNorm.convert_sync_batchnorm``
before being wrapped in DDP. This job runs on CPU with the gloo backend, and SyncBatchNorm
only supports accelerator modules: DDP's constructor raises ``ValueError: SyncBatchNorm
layers only work with GPU modules`` on both ranks, before the first step (older releases
raised "SyncBatchNorm expected input tensor to be on GPU" in the first forward). Nothing
hangs; both ranks exit with the same error. The fix is to keep plain ``BatchNorm2d`` on CPU
(drop the ``convert_sync_batchnorm`` call / set ``sync_bn: false``), or
``GroupNorm`` if per-rank batches are too small for batch statistics.

Source: PyTorch docs ``torch.nn.SyncBatchNorm`` ("currently SyncBatchNorm only supports
DistributedDataParallel (DDP) with single GPU per process"); GitHub issues
open-mmlab/mmsegmentation#2147, open-mmlab/mmagic#133 ("SyncBatchNorm expected input tensor
to be on GPU" -> "substitute SyncBN with BN"); pytorch/pytorch#78078 (CPU support never
merged).

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times;
``--fixed`` (ablation) skips the conversion and trains 40 steps.
Measured on 2026-11-28 (torch 2.13.0+cpu, 2-core host shared with ~7 other helpers, load average
~16): both ranks raise ``ValueError: SyncBatchNorm layers only work with GPU modules`` in
``DDP(net)``, exit code 1, 31 s wall (mostly start-up); ``--fixed`` trains 40 steps, median step
96.0 / 97.3 ms.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/b5_syncbn_on_cpu_gloo.py --report
"""

import argparse
import datetime
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

CONFIG = {"sync_bn": True, "lr": 0.05, "batch_size": 32}   # from the 8-GPU recipe


def make_model():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--report", action="store_true")
    p.add_argument("--fixed", action="store_true", help="ablation: plain BatchNorm2d")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = make_model()
    if CONFIG["sync_bn"] and not args.fixed:
        net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=CONFIG["lr"], momentum=0.9)
    n = 4096
    data = TensorDataset(torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=CONFIG["batch_size"], sampler=sampler, drop_last=True)
    step_ms = []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
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
        print(f"rank {rank}: {step} steps, median step {statistics.median(step_ms[5:]):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
