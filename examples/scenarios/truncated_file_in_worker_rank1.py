# expect-verdict: failure
# expect-rule: FL010
# expect-first-fix: -
"""Cause: samples are stored one ``.npy`` file per sample; one file (sample 45) was truncated
by an interrupted copy. The DataLoader runs with ``num_workers=1``, so the exception is raised
inside rank 1's worker process by ``numpy.load`` (``ValueError: Failed to read all data for
array. Expected (3, 32, 32) = 3072 elements, could only read 1520 elements.``) and re-raised
in rank 1's main process by the DataLoader as ``ValueError: Caught ValueError in DataLoader
worker process 0. Original Traceback ...``. With ``DistributedSampler(shuffle=False)``
and batch size 4, sample 45 is in rank 1's batch at step 5. Rank 1 dies; rank 0, already in the
gradient all-reduce, loses its peer ("Connection closed by peer"), a symptom. The root cause is
the exception in rank 1's data-loading worker.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times as they
happen, so you see rank 1 stop at step 5 with the worker traceback; ``--no-truncate`` writes the
file whole (ablation: the run completes).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/truncated_file_in_worker_rank1.py --report
"""

import argparse
import datetime
import os
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

BAD_INDEX = 45


class NpyFolder(Dataset):
    def __init__(self, root, n):
        self.paths = [os.path.join(root, f"{i:05d}.npy") for i in range(n)]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        x = np.load(self.paths[i])  # raises on the truncated file
        return torch.from_numpy(x).float(), i % 10


def write_folder(root, n, truncate):
    rng = np.random.default_rng(0)
    for i in range(n):
        path = os.path.join(root, f"{i:05d}.npy")
        np.save(path, rng.standard_normal((3, 32, 32)).astype(np.float32))
        if truncate and i == BAD_INDEX:
            with open(path, "r+b") as f:  # an interrupted copy: the second half is missing
                f.truncate(os.path.getsize(path) // 2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--no-truncate", action="store_true", help="ablation: write every file whole")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(4),
            torch.nn.Flatten(),
            torch.nn.Linear(256, 10),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with tempfile.TemporaryDirectory(prefix=f"npy_r{rank}_") as root:
        write_folder(root, 256, truncate=not args.no_truncate)
        data = NpyFolder(root, 256)
        sampler = DistributedSampler(data, shuffle=False)
        loader = DataLoader(data, batch_size=4, sampler=sampler, num_workers=1, drop_last=True)
        step = 0
        t_last = time.perf_counter()
        for epoch in range(1000):
            sampler.set_epoch(epoch)
            for x, y in loader:
                time.sleep(0.02)  # stands in for a heavier model's compute
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                now = time.perf_counter()
                if args.report:
                    print(f"rank {rank} step {step} ms {1000 * (now - t_last):.0f}", flush=True)
                t_last = now
                step += 1
                if step >= args.steps:
                    break
            if step >= args.steps:
                break
    if args.report:
        print(f"rank {rank} finished {step} steps", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
