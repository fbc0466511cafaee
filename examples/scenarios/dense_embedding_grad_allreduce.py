# expect-verdict: communication
# expect-rule: CM001
# expect-first-fix: -
"""Cause: a recommendation-style model has a large ID embedding table (200k ids x 64 = 12.8M
parameters, 51 MiB) built with the default ``nn.Embedding(sparse=False)``. Each batch touches
only a few hundred rows, but autograd produces a *dense* 51 MiB gradient for the table and
DDP all-reduces all of it every step. The compute per step is a few milliseconds (a lookup and
a small MLP), so the step is dominated by gradient all-reduce traffic that has no compute left
to hide behind.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and the time of
``backward()`` (which holds the gradient all-reduce); ``--num-ids 20000`` shrinks the table
to 5 MiB with the same per-example compute (ablation: the traffic goes, the work stays; the
dense-gradient fill and the SGD update over the table shrink too, a small part of the step).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/dense_embedding_grad_allreduce.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class ClickModel(torch.nn.Module):
    def __init__(self, num_ids):
        super().__init__()
        self.ids = torch.nn.Embedding(num_ids, 64)  # dense gradient (sparse=False default)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(64 + 16, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 1),
        )

    def forward(self, item_ids, feats):
        e = self.ids(item_ids).mean(1)  # bag of 8 ids per example
        return self.mlp(torch.cat([e, feats], 1)).squeeze(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--num-ids", type=int, default=200_000)
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(ClickModel(args.num_ids))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    times, bwd = [], []
    t_last = time.perf_counter()
    for _ in range(args.steps):
        item_ids = torch.randint(0, args.num_ids, (256, 8), generator=g)
        feats = torch.randn(256, 16, generator=g)
        clicks = (torch.rand(256, generator=g) < 0.1).float()
        loss = F.binary_cross_entropy_with_logits(model(item_ids, feats), clicks)
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss.backward()
        bwd.append(time.perf_counter() - t0)
        opt.step()
        now = time.perf_counter()
        times.append(now - t_last)
        t_last = now
    if args.report:
        med = lambda v: 1000 * sorted(v)[len(v) // 2]  # noqa: E731
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        print(
            f"rank {rank} backward (incl. gradient all-reduce) ms: " + " ".join(f"{1000 * t:.0f}" for t in bwd),
            flush=True,
        )
        print(f"rank {rank} median step {med(times):.1f} ms, median backward {med(bwd):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
