"""A small 2-rank CPU/gloo DDP job for `ddpdoctor run --watch` tests: healthy steps of ~10-20 ms, then
(optionally) a problem that starts late.

    torchrun --standalone --nproc_per_node=2 tests/scripts/watch_train.py --steps 300
        [--late-from 100 --late-rank 1 --late-ms 40]   # rank 1 calls expensive_feature_hash() every step
        [--hang-at 120]                                # rank 0 waits in a barrier rank 1 never reaches
        [--fail-at 150]                                # rank 1 raises
        [--timeout-s 60]
"""

import argparse
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def expensive_feature_hash(ms: float) -> int:
    """Pure Python work on the training thread: what a sampler should name."""
    end = time.perf_counter() + ms / 1000
    h = 0
    while time.perf_counter() < end:
        for i in range(200):
            h = (h * 31 + i) & 0xFFFFFFFF
    return h


def stuck_in_preprocessing() -> None:
    """Rank 1 never comes back from here (a deadlock in the script's own code)."""
    while True:
        time.sleep(0.5)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--late-from", type=int, default=-1)
    p.add_argument("--late-rank", type=int, default=1)
    p.add_argument("--late-ms", type=float, default=40.0)
    p.add_argument("--hang-at", type=int, default=-1)
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.add_argument("--fail-at", type=int, default=-1, help="rank 1 raises at this step")
    p.add_argument("--work", type=int, default=64, help="batch size: the step's compute")
    args = p.parse_args()

    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout_s))
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.work, 256)
    y = torch.randint(0, 10, (args.work,))
    t20 = None
    for step in range(args.steps):
        if step == 20:
            t20 = time.perf_counter()
        if step == args.hang_at:
            if rank == 0:
                dist.barrier()  # the barrier rank 1 never reaches
            else:
                stuck_in_preprocessing()
        if step == args.fail_at and rank == 1:
            raise RuntimeError("bad batch: labels out of range in shard 7")
        if args.late_from >= 0 and step >= args.late_from and rank == args.late_rank:
            expensive_feature_hash(args.late_ms)
        time.sleep(0.008)  # the rest of a step (I/O, a device): keeps the step ~10-20 ms on a busy host
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:
        train_s = time.perf_counter() - t20 if t20 is not None else float("nan")
        print(f"done: {args.steps} steps, last loss {loss.item():.3f}; train_s {train_s:.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
