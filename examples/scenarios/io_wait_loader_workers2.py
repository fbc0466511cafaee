# expect-verdict: dataloader
# expect-rule: DL001
# expect-first-fix: num_workers
"""Cause: every sample is fetched from remote storage (an object store / network file
system): ``__getitem__`` blocks ~8 ms per sample on the read before a cheap decode. The job
already uses ``num_workers=2``, but two workers each waiting on one read at a time deliver
a batch of 16 every ~64 ms, far slower than the ~10-30 ms training step, so the training
loop waits on the DataLoader. The wait uses no CPU (the ``time.sleep`` models the blocking
read, the only sleep here), so more workers (or async reads) would help even on 2 cores.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and the time
each step waited in ``next(loader)``; ``--io-ms 0`` removes the storage wait (ablation).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/io_wait_loader_workers2.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class RemoteSignals(Dataset):
    """Samples stored as raw float16 bytes on remote storage."""

    def __init__(self, n=4096, io_ms=8.0):
        g = torch.Generator().manual_seed(0)
        self.blobs = [torch.randn(512, generator=g).half().numpy().tobytes() for _ in range(n)]
        self.io_s = io_ms / 1000

    def __len__(self):
        return len(self.blobs)

    def _read(self, i):
        time.sleep(self.io_s)           # blocking network read (latency of the remote store)
        return self.blobs[i]

    def __getitem__(self, i):
        x = torch.frombuffer(bytearray(self._read(i)), dtype=torch.float16).float()
        return (x - x.mean()) / (x.std() + 1e-6), i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--io-ms", type=float, default=8.0)
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = RemoteSignals(io_ms=args.io_ms)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=args.workers, drop_last=True,
                        persistent_workers=args.workers > 0)
    times, waits = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
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
        print(f"rank {rank} loader wait ms: " + " ".join(f"{1000 * t:.0f}" for t in waits), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
