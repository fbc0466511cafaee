# expect-verdict: failure
# expect-rule: FL005
# expect-first-fix: -
"""Cause: each rank writes a small training log through a logger guarded by a
``threading.Lock``. When the file passes a size limit the logger rotates it, and ``rotate()``
(called with the lock held) logs a "rotated" line through ``write()``, which takes the same
non-reentrant lock again: the thread deadlocks on itself. Rank 1's shard has malformed samples,
so rank 1 also logs a warning line per skipped sample; its log reaches the limit first, at the
start of step 5, and rank 1's main thread blocks forever in ``lock.acquire()`` (idle, no CPU). Rank 1 simply
stops issuing collectives; rank 0 enters the next gradient all-reduce and waits for it until
the 15 s collective timeout fires on rank 0. The timeout on rank 0 is the symptom; the cause is
rank 1 stuck outside any collective.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times and log size
as they happen; rank 1's last line (step 4) says its next write rotates the log, and neither
rank prints step 5. Rank 0 then fails ~15 s later with ``Timed out waiting 15000ms for recv
operation to complete`` and torchrun stops rank 1 with SIGTERM. ``--rlock`` uses ``threading.RLock`` (ablation: the rotation
re-enters the lock and the run completes).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/log_rotation_deadlock_rank1.py --report
"""

import argparse
import datetime
import os
import tempfile
import threading
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

MAX_LOG_BYTES = 4096


class RotatingLog:
    def __init__(self, path, lock):
        self.path, self.lock, self.rotations = path, lock, 0
        self.f = open(path, "w")

    def write(self, line):
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()
            if self.f.tell() > MAX_LOG_BYTES:
                self.rotate()

    def rotate(self):  # called with self.lock held
        self.f.close()
        self.rotations += 1
        os.replace(self.path, f"{self.path}.{self.rotations}")
        self.f = open(self.path, "w")
        self.write(f"log rotated ({self.rotations})")  # re-takes self.lock: deadlock with a Lock


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rlock", action="store_true", help="ablation: re-entrant lock")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    with tempfile.TemporaryDirectory(prefix=f"trainlog_r{rank}_") as tmp:
        log = RotatingLog(os.path.join(tmp, "train.log"), threading.RLock() if args.rlock else threading.Lock())
        t_last = time.perf_counter()
        for step in range(args.steps):
            x = torch.randn(128, 256, generator=g)
            y = torch.randint(0, 10, (128,), generator=g)
            if rank == 1:  # rank 1's shard: 12 malformed samples per batch
                for j in range(12):
                    log.write(f"step {step}: skipped sample {128 * step + j}: malformed record, missing field")
            time.sleep(0.02)  # stands in for loading the batch
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            if args.report:
                size = log.f.tell()
                print(
                    f"rank {rank} step {step} ms {1000 * (now - t_last):.0f} log bytes {size}"
                    + (" (next write rotates)" if size > MAX_LOG_BYTES - 1100 else ""),
                    flush=True,
                )
            t_last = now
            log.write(f"step {step} loss {loss.item():.4f}")
        if args.report:
            print(f"rank {rank} finished {args.steps} steps, {log.rotations} log rotations", flush=True)
        log.f.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
