# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: Join
"""Cause: each rank trains on its own list of pre-batched files (``rank0/*.pt``,
``rank1/*.pt``), and the lists are not the same length: rank 0 gets 3 files of 2 batches (6
batches per epoch), rank 1 4 files (8 batches). After its last batch rank 0 leaves the loop
and waits in the final ``dist.barrier()``; rank 1 goes on to its 7th batch and waits in that
step's gradient all-reduce. The two collectives never match: the job hangs until the
process-group timeout (15 s) turns it into an error on both ranks.

(The brief's example was 18 vs 24 batches per epoch; ``ddpdoctor run`` stops a job after 10
optimizer steps by default, so the same 3:4 split is scaled down to 6 vs 8 to hang inside
that window.)

Verify (plain torchrun, no ddpdoctor): each rank prints its batch count and every step; the
job ends with a gloo timeout error about 15 s after rank 0's last step. ``--same-count`` gives
both ranks 3 files (ablation: the job ends normally).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/uneven_batches_hang.py
"""

import argparse
import datetime
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

BATCHES_PER_FILE = 2


def write_files(folder, rank, files):
    g = torch.Generator().manual_seed(rank)
    paths = []
    for f in range(files):
        path = os.path.join(folder, f"rank{rank}-{f:03d}.pt")
        torch.save([(torch.randn(128, 512, generator=g), torch.randint(0, 10, (128,), generator=g))
                    for _ in range(BATCHES_PER_FILE)], path)
        paths.append(path)
    return paths


class BatchFiles(Dataset):
    def __init__(self, paths):
        self.index = [(p, b) for p in paths for b in range(BATCHES_PER_FILE)]

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        path, b = self.index[i]
        return torch.load(path)[b]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--same-count", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    files = 3 if rank == 0 or args.same_count else 4
    with tempfile.TemporaryDirectory(prefix=f"batches_r{rank}_") as folder:
        loader = DataLoader(BatchFiles(write_files(folder, rank, files)), batch_size=None, shuffle=True)
        print(f"rank {rank}: {len(loader)} batches per epoch", flush=True)
        step = 0
        for epoch in range(args.epochs):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                print(f"rank {rank}: step {step} loss {loss.item():.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
