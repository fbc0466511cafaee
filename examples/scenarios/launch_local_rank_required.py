# expect-verdict: failure
# expect-rule: FL016
# expect-first-fix: -
"""Cause: the script was written for the old ``python -m torch.distributed.launch`` launcher,
which passed ``--local_rank=N`` on every worker's command line, so its parser declares
``--local_rank`` as ``required=True``. ``torchrun`` does not pass that argument (it sets the
``LOCAL_RANK`` environment variable instead), so on every rank ``parse_args()`` stops with
``error: the following arguments are required: --local_rank`` and exit code 2, before the
process group is even created. No training step runs; nothing is slow, the job cannot start.

Verify (plain torchrun, no ddpdoctor): the command below fails at once on both ranks with the
argparse usage error (exit code 2; ``--report`` is never reached). Passing
``--local_rank 0`` on the command line (ablation) satisfies the parser and the 30 steps run and
``--report`` prints per-rank step times. The real fix is to read ``LOCAL_RANK`` from the
environment: ``default=int(os.environ.get("LOCAL_RANK", 0))`` instead of ``required=True``.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/launch_local_rank_required.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def parse():
    p = argparse.ArgumentParser(description="train a classifier (launch with torch.distributed.launch)")
    p.add_argument("--local_rank", type=int, required=True, help="set by torch.distributed.launch")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--report", action="store_true")
    return p.parse_args()


def main():
    args = parse()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(rank)
    times = []
    t_last = time.perf_counter()
    for _ in range(args.steps):
        x = torch.randn(128, 256, generator=g)
        y = torch.randint(0, 10, (128,), generator=g)
        time.sleep(0.02)  # stands in for loading the batch
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = time.perf_counter()
        times.append(now - t_last)
        t_last = now
    if args.report:
        print(
            f"rank {rank} (--local_rank {args.local_rank}) step ms: " + " ".join(f"{1000 * t:.0f}" for t in times),
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
