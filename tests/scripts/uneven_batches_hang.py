"""A CPU DDP job (gloo, 2 ranks) whose ranks have different numbers of batches per epoch: each rank
reads its own list of files (here: its own slice of sizes, 18 batches on rank 0 and 24 on rank 1), with
no DistributedSampler and no Join.  Rank 0 leaves its loop first and waits in the closing barrier at the
end of the script; rank 1 goes on into the gradient all-reduce of its next step.  The process group's
short timeout (5 s) ends the job.

Usage: torchrun --nproc_per_node=2 THIS [--mode uneven|mismatch|early_exit]
  uneven      (default) as above
  mismatch    equal batches, but after step 3 rank 0 calls a barrier (a rank-0-only branch) while rank 1
              goes on into its next gradient all-reduce
  early_exit  equal batches, but rank 1 leaves its loop after step 3 on a local condition and ends with
              exit code 0 (no closing barrier) while rank 0 goes on training
"""

import argparse
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

BATCHES = {0: 18, 1: 24}  # batches per epoch on each rank: its own list of files
BATCH = 8


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="uneven", choices=["uneven", "mismatch", "early_exit"])
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    rank = dist.get_rank()
    torch.manual_seed(rank)
    n = (BATCHES.get(rank, 18) if args.mode == "uneven" else 18) * BATCH
    data = TensorDataset(torch.randn(n, 32), torch.randn(n, 4))
    loader = DataLoader(data, batch_size=BATCH, shuffle=True)
    model = DDP(torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(loader):
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if args.mode == "mismatch" and step == 3 and rank == 0:
            dist.barrier()  # the bug: a collective on one rank only
        if args.mode == "early_exit" and step == 3 and rank == 1:
            return  # the bug: a local stopping condition, and no closing barrier
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
