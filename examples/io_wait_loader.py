"""A DDP job whose samples each wait 3 ms on storage (a blocking read from a slow network file
system, modelled by sleeping in __getitem__) with the loader in the training process
(num_workers=0): every step waits ~24 ms for its 8 samples while the model needs ~1 ms.
A waiting worker needs no CPU of its own, so num_workers=2 overlaps the reads even on 2 cores.

    torchrun --nproc_per_node=2 examples/io_wait_loader.py [--steps 14]
    ddpdoctor run --try dataloader.num_workers=2 -- torchrun --nproc_per_node=2 examples/io_wait_loader.py
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class RemoteSamples(Dataset):
    def __len__(self):
        return 2048

    def __getitem__(self, i):
        time.sleep(0.003)                       # the read waits on storage, not on the CPU
        return torch.randn(64), i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = RemoteSamples()
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, num_workers=0, drop_last=True)
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if dist.get_rank() == 0:
        print(f"done: {step} steps, last loss {loss.item():.3f}")
    dist.barrier()        # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
