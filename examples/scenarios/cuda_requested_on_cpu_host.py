# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: CUDA
"""Cause: the script was written for a GPU node: it calls ``torch.cuda.set_device(local_rank)``
and moves the model to ``f"cuda:{local_rank}"`` unconditionally (only the backend was changed
to gloo). Launched on this CPU-only host with the CPU build of torch, every rank raises as
soon as it touches CUDA, in ``torch.cuda.set_device``, before any step. (On the CPU build
that call fails with an ``AttributeError`` about ``torch._C._cuda_setDevice``; had the
script reached ``net.to(device)`` it would have raised ``AssertionError: Torch not compiled
with CUDA enabled``.)

Verify (plain torchrun, no ddpdoctor): ``--report`` prints ``torch.cuda.is_available()`` and
the device each rank asks for; ``--device cpu`` (ablation) skips ``set_device`` and keeps
the model and the batches on the CPU, and the 30 steps complete.
Observed (torch 2.13.0+cpu, this host; whole run ~5 s): each rank prints "cuda available
False, device cuda:N", then both raise from ``torch.cuda.set_device(local_rank)``:

    [rank0]: AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'
    [rank1]: AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'

With ``--device cpu`` the 30 steps complete (~56 ms each).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/cuda_requested_on_cpu_host.py
"""

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="ablation: --device cpu")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    device = torch.device(f"cuda:{local_rank}" if args.device == "cuda" else "cpu")
    if args.report:
        print(f"rank {rank}: torch {torch.__version__}, cuda available {torch.cuda.is_available()}, "
              f"device {device}", flush=True)
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(64, 10))
    net = net.to(device)
    model = DDP(net, device_ids=[local_rank] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(4096, 3, 32, 32, generator=g), torch.randint(0, 10, (4096,), generator=g))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler, drop_last=True, pin_memory=args.device == "cuda")
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            if args.report:
                print(f"rank {rank} step {step} ms {1000 * (now - t_last):.1f}", flush=True)
            t_last = now
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
