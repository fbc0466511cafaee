"""A DDP job (gloo, CPU) whose samples each wait 12 ms on storage (a blocking read, modelled by sleeping
in __getitem__: no CPU used) with num_workers=2: a batch of 8 takes a worker ~96 ms while a step
computes for ~10 ms (more on a busy host), so the two workers cannot keep up and every step waits for its batch.  The
workers wait, they do not compute: more workers (not more CPUs) is the fix.

    torchrun --nproc_per_node=2 tests/scripts/waiting_loader_workers.py [--steps 30] [--workers 2]
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

SAMPLE_WAIT_S = 0.012
COMPUTE_MATMULS = 4


class SlowStorage(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(SAMPLE_WAIT_S)  # the read waits on storage, not on the CPU
        return torch.randn(256), i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
    work = torch.randn(384, 384)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = SlowStorage()
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(
        data,
        batch_size=8,
        sampler=sampler,
        num_workers=args.workers,
        drop_last=True,
        persistent_workers=args.workers > 0,
    )
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            for _ in range(COMPUTE_MATMULS):  # the step's compute (no parameters: no extra communication)
                work = torch.tanh(work @ work / 384)
            opt.step()
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
