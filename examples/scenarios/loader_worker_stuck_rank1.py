# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: DataLoader
"""Cause: a DataLoader worker on rank 1 never returns a sample. Rank 1 runs the job's
metrics uploader: a background thread that holds the uploader's lock while it sends a
batch of records (most of the time). Its ``Dataset.__getitem__`` records each sample's load
time through the same uploader. The DataLoader forks its worker processes (the default start
method on Linux) while the thread holds the lock: each worker inherits a locked lock and no
thread that will ever release it, so the first ``__getitem__`` blocks forever. Rank 1 waits in
``next()`` on its loader (``timeout=0``, the default, waits forever); rank 0 waits in the
gradient all-reduce of its first step until the 15 s process-group timeout, and the job dies.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints when each rank asks for its first
batch and when it gets it; ``--spawn`` (ablation) starts the workers with the ``spawn``
method, which does not copy the held lock, and the job trains.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/loader_worker_stuck_rank1.py
"""

import argparse
import datetime
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class MetricsUploader:
    """Buffers records and sends them in batches from a background thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.records = []

    def record(self, name, value):
        with self.lock:
            self.records.append((name, value))

    def run_forever(self):
        while True:
            with self.lock:  # held while "sending" the batch (a slow network call)
                time.sleep(0.5)
                self.records.clear()
            time.sleep(0.001)


UPLOADER = MetricsUploader()


class Features(Dataset):
    def __init__(self, n=4096):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 32, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        t0 = time.perf_counter()
        x = self.x[i] * 2.0
        UPLOADER.record("load_ms", 1000 * (time.perf_counter() - t0))
        return x, self.y[i]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--spawn", action="store_true", help="ablation: start workers with spawn")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    if rank == 1:  # the uploader runs on the rank that owns the metrics sink
        threading.Thread(target=UPLOADER.run_forever, daemon=True).start()
        time.sleep(0.1)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Features()
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data), num_workers=2,
                        multiprocessing_context="spawn" if args.spawn else None)
    step = 0
    t_ask = time.perf_counter()
    for x, y in loader:
        if args.report and step == 0:
            print(f"rank {rank} first batch after {time.perf_counter() - t_ask:.2f} s", flush=True)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank} trained {step} steps", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
