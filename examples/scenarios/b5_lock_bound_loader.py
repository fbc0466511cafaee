# expect-verdict: dataloader
# expect-rule: category:dataloader
# expect-first-fix: lock
"""Cause: the dataset reads fixed-size records from one packed shard file on network storage.
``RecordShard.__init__`` opens the file once, in the main process, and guards ``seek()`` +
``read()`` on that shared handle with a ``multiprocessing.Lock`` so that the forked DataLoader
workers (which all inherit the same file descriptor and therefore the same file offset) do not
interleave their seeks. The lock is held for the whole read, including the storage round-trip
(~6 ms per record on this "network" filesystem, modelled with ``time.sleep`` inside the read:
the only sleep in this script, standing for waiting on remote storage). So the 4 workers per
rank fetch one record at a time: ``num_workers=4`` behaves like ``num_workers=1``, and the
training loop waits on the DataLoader every step. More workers would not help; the fix is to
drop the lock by giving each worker its own handle (open it lazily in the worker, or in
``worker_init_fn``) or by positional reads (``os.pread``) that need no shared offset.

Both ranks are equally slow (not imbalance); the model is a small MLP (not compute) with a
tiny all-reduce (not communication): dataloader-bound.

Source: h5py docs "Multi-threading" (a global lock serialises all reads), and the common
forum advice not to open a file before the DataLoader forks its workers but once per worker
(fast.ai forums "Data block API for HDF5", PyTorch forums on h5py + num_workers).

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank mean step time (steps 5+) and
the mean time the loop waited for the next batch; ``--fixed`` (ablation) reads with ``os.pread``
and no lock (same storage latency per record).
Measured on 2026-11-28 (torch 2.13.0+cpu, 2-core host shared with ~7 other helpers, load average
10-12): with the lock, mean step 111.3 / 111.2 ms (rank 0 / rank 1, steps 5-39), mean wait
for the batch 75.0 / 39.3 ms (rank 1 waits in the all-reduce instead); ``--fixed`` 25.1 /
25.0 ms (wait 13.7 / 20.0 ms): 4.4x. Default run 35 s wall including start-up.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/b5_lock_bound_loader.py --report
"""

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

RECORD_FLOATS = 257          # 256 features + label
STORAGE_LATENCY_S = 0.006    # round-trip to the network filesystem per record


class RecordShard(Dataset):
    def __init__(self, path, n, lock_shared_handle=True):
        self.path, self.n = path, n
        self.nbytes = RECORD_FLOATS * 4
        self.lock_shared_handle = lock_shared_handle
        self.fh = open(path, "rb", buffering=0)          # opened before the workers fork
        self.lock = mp.Lock()

    def __len__(self):
        return self.n

    def _read(self, offset):
        if self.lock_shared_handle:
            with self.lock:                               # serialises every worker
                self.fh.seek(offset)
                time.sleep(STORAGE_LATENCY_S)             # waiting on remote storage
                return self.fh.read(self.nbytes)
        time.sleep(STORAGE_LATENCY_S)                     # same remote-storage wait, no shared offset
        return os.pread(self.fh.fileno(), self.nbytes, offset)

    def __getitem__(self, i):
        rec = np.frombuffer(self._read(i * self.nbytes), dtype=np.float32)
        x = torch.from_numpy(rec[:-1].copy())
        return (x - x.mean()) / (x.std() + 1e-6), int(rec[-1])


def write_shard(path, n, rng):
    x = rng.standard_normal((n, RECORD_FLOATS)).astype(np.float32)
    x[:, -1] = rng.integers(0, 10, n)
    x.tofile(path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--report", action="store_true")
    p.add_argument("--fixed", action="store_true", help="ablation: os.pread, no lock")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    n = 4096
    path = os.path.join(tempfile.gettempdir(), f"b5_lock_shard_{os.getpid()}.bin")
    write_shard(path, n, np.random.default_rng(0))
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = RecordShard(path, n, lock_shared_handle=not args.fixed)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=4, drop_last=True,
                        persistent_workers=True)
    step_ms, wait_ms = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        it = iter(loader)
        while step < args.steps:
            t0 = time.perf_counter()
            batch = next(it, None)
            if batch is None:
                break
            wait_ms.append(1000 * (time.perf_counter() - t0))
            x, y = batch
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
    if args.report:
        # mean, not median: the 4 workers finish their batches in bursts of 4
        print(f"rank {rank}: mean step {statistics.mean(step_ms[5:]):.1f} ms, "
              f"mean wait for batch {statistics.mean(wait_ms[5:]):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    os.remove(path)


if __name__ == "__main__":
    main()
