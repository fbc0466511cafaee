# expect-verdict: communication
# expect-rule: CM001
# expect-first-fix: -
"""Cause: the training loop was ported from hand-written data parallelism and kept its
gradient-averaging loop after wrapping the model in DDP:

    loss.backward()                       # DDP already all-reduced and averaged the gradients
    for p in model.parameters():          # ... and this does it again, one tensor at a time
        dist.all_reduce(p.grad); p.grad /= world_size

The model is a deep MLP with 24 blocks (Linear + LayerNorm; 100 parameter tensors in all), so
every step issues 100 extra small blocking all-reduces after backward, one per parameter
tensor, none of them overlapped with compute. The result is numerically the same (the gradients are already
identical on every rank), only slower: the step is dominated by collectives it does not need.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times, the number of
extra all-reduce calls per step and the time spent in them; ``--no-manual-sync`` drops the
loop (ablation: DDP's own bucketed, overlapped all-reduce remains).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/manual_grad_allreduce_after_ddp.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class DeepMLP(torch.nn.Module):
    def __init__(self, width=128, depth=24):
        super().__init__()
        self.inp = torch.nn.Linear(64, width)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.LayerNorm(width)) for _ in range(depth)
        )
        self.out = torch.nn.Linear(width, 10)

    def forward(self, x):
        h = F.relu(self.inp(x))
        for b in self.blocks:
            h = h + F.relu(b(h))
        return self.out(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--no-manual-sync", action="store_true", help="ablation: drop the per-parameter all-reduce loop")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(DeepMLP())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    times, sync = [], []
    calls = 0
    t_last = time.perf_counter()
    for _ in range(args.steps):
        x = torch.randn(64, 64, generator=g)
        y = torch.randint(0, 10, (64,), generator=g)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        t0 = time.perf_counter()
        if not args.no_manual_sync:
            calls = 0
            for prm in model.parameters():  # left over from the pre-DDP code
                dist.all_reduce(prm.grad)
                prm.grad /= world
                calls += 1
        sync.append(time.perf_counter() - t0)
        opt.step()
        now = time.perf_counter()
        times.append(now - t_last)
        t_last = now
    if args.report:
        med = lambda v: 1000 * sorted(v)[len(v) // 2]  # noqa: E731
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        print(
            f"rank {rank} median step {med(times):.1f} ms, extra all_reduce calls per step {calls}, "
            f"median time in them {med(sync):.1f} ms",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
