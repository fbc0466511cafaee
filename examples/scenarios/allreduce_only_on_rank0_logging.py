# expect-verdict: failure
# expect-rule: FL021
# expect-first-fix: -
"""Cause: the loop logs the global mean loss every 5 steps, but the all-reduce was put inside
the ``if rank == 0:`` block that does the printing:

    if rank == 0 and step % 5 == 4:
        dist.all_reduce(loss_sum)          # only rank 0 calls this collective
        print(...)

Collectives must be called by every rank in the same order. At step 4 rank 0 enters an
all-reduce of one float that rank 1 never calls; rank 1 goes on to step 5 and enters DDP's
gradient all-reduce. The two ranks are now in different collectives (a 1-element logging
all-reduce on rank 0, a gradient-bucket all-reduce on rank 1), so the job breaks there. Measured
with gloo: rank 0 receives rank 1's ~262 KiB gradient bucket where it expected 4 bytes and
aborts (``gloo::EnforceNotMet ... Received data size doesn't match expected size. Is there a
distributed collective mismatch in your code?``, SIGABRT, exitcode -6); rank 1 then fails with
"Connection reset by peer". The abort signal and the reset are symptoms; the cause is the
collective that only one rank calls.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times as they
happen and which collective each rank enters at the logging step; ``--all-ranks`` moves the
all-reduce out of the ``if`` so every rank calls it (ablation: the run completes).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/allreduce_only_on_rank0_logging.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--all-ranks", action="store_true", help="ablation: every rank calls the logging all-reduce")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Linear(256, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 10),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    running = torch.zeros(1)
    t_last = time.perf_counter()
    for step in range(args.steps):
        x = torch.randn(128, 256, generator=g)
        y = torch.randint(0, 10, (128,), generator=g)
        time.sleep(0.02)  # stands in for loading the batch
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running += loss.detach()
        now = time.perf_counter()
        if args.report:
            print(f"rank {rank} step {step} ms {1000 * (now - t_last):.0f}", flush=True)
        t_last = now
        if step % 5 == 4:
            if args.all_ranks:
                dist.all_reduce(running)
            if rank == 0:
                if not args.all_ranks:
                    if args.report:
                        print(f"rank {rank} step {step}: entering logging all_reduce (rank 1 does not)", flush=True)
                    dist.all_reduce(running)  # the bug: only rank 0 gets here
                print(f"step {step} mean loss {running.item() / (5 * world):.4f}", flush=True)
            running.zero_()
    if args.report:
        print(f"rank {rank} finished {args.steps} steps", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
