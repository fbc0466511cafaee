# expect-verdict: compute
# expect-rule: CP001
# expect-first-fix: -
# expect-absent: DL001 DL003 CM001 IM001 CF001 CF002 CF004
"""Healthy: a control job. A small ResNet-style CNN trains on 32x32 images that are already in
memory as one tensor, with DistributedSampler, ``set_epoch`` every epoch, ``num_workers=0``
(indexing a tensor costs microseconds), one intra-op thread per rank (torchrun's default
OMP_NUM_THREADS=1, 2 ranks on 2 cores), and the DDP defaults. Each step is ~190 ms of
convolution arithmetic; the gradient (~57k parameters, ~0.2 MiB) all-reduce is a few
milliseconds and overlaps with backward. Nothing avoidable dominates: the step time is the
model's arithmetic, and the only way to go faster is less arithmetic or faster hardware.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times, time in
``next(loader)`` and in ``backward``; ``--width 16`` (half the channels, ~1/4 of the
arithmetic) shrinks the step roughly in proportion, the sign of a compute-bound step.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/healthy_cnn_compute_bound.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(c)
        self.c2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


class SmallResNet(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, width, 3, padding=1)
        self.blocks = torch.nn.Sequential(Block(width), torch.nn.MaxPool2d(2), Block(width), Block(width))
        self.head = torch.nn.Linear(width, 10)

    def forward(self, x):
        return self.head(self.blocks(F.relu(self.stem(x))).mean((2, 3)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--width", type=int, default=32, help="channels; 16 is ~1/4 the arithmetic")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(SmallResNet(args.width))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(2048, 3, 32, 32, generator=g), torch.randint(0, 10, (2048,), generator=g))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=0, drop_last=True)
    times, waits, bwd = [], [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        it = iter(loader)
        while step < args.steps:
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            t1 = time.perf_counter()
            loss.backward()
            bwd.append(time.perf_counter() - t1)
            opt.step()
            step += 1
            now = time.perf_counter()
            times.append(now - t_last)
            t_last = now
        if step >= args.steps:
            break
    if args.report:
        med = lambda v: 1000 * sorted(v)[len(v) // 2]  # noqa: E731
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        print(
            f"rank {rank} median step {med(times):.1f} ms, median loader {med(waits):.2f} ms, "
            f"median backward {med(bwd):.1f} ms, intra-op threads {torch.get_num_threads()}",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
