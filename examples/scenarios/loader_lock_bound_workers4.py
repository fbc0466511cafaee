# expect-verdict: dataloader
# expect-rule: category:dataloader
# expect-first-fix: handle
"""Cause: every sample is read through one handle shared by all DataLoader workers of a rank (a
shared HDF5 / SQLite handle): the read holds one process-wide lock (a ``multiprocessing.Lock``
created before the workers fork) for ~4 ms per sample, so the rank's workers deliver one sample
at a time whatever their number. A batch of 16 takes ~64 ms of reads, slower than the training
step, so the job waits on its loader — and more workers cannot help: they only queue on the lock.

What misleads a short measurement: at its start a loader with W workers prepares
``W x prefetch_factor`` batches at once; the first steps are served from that buffer, and the
steps after it wait on the lock. With 14 workers the buffer holds 28 batches.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times; compare
``--workers 4`` and ``--workers 14`` over steps past the buffer (e.g. ``--steps 200``).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/loader_lock_bound_workers4.py --report
"""

import argparse
import datetime
import multiprocessing
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class SharedHandleSignals(Dataset):
    """Samples behind one shared handle: every read takes the handle's lock."""

    def __init__(self, n=8192, read_ms=4.0):
        g = torch.Generator().manual_seed(0)
        self.blobs = [torch.randn(512, generator=g).half().numpy().tobytes() for _ in range(n)]
        self.read_s = read_ms / 1000
        self.handle_lock = multiprocessing.Lock()  # inherited by every worker of this rank

    def __len__(self):
        return len(self.blobs)

    def __getitem__(self, i):
        with self.handle_lock:  # the shared handle serves one read at a time
            time.sleep(self.read_s)  # the read from storage through the one shared handle
            blob = self.blobs[i]
        x = torch.frombuffer(bytearray(blob), dtype=torch.float16).float()
        return (x - x.mean()) / (x.std() + 1e-6), i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--read-ms", type=float, default=4.0)
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, 512)),
        torch.nn.Conv1d(1, 32, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.Conv1d(32, 32, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool1d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = SharedHandleSignals(read_ms=args.read_ms)
    sampler = DistributedSampler(data)
    loader = DataLoader(
        data,
        batch_size=16,
        sampler=sampler,
        num_workers=args.workers,
        drop_last=True,
        persistent_workers=args.workers > 0,
    )
    times = []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            now = time.perf_counter()
            times.append(now - t_last)
            t_last = now
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
