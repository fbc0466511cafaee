"""A 2-rank CPU DDP job (gloo) for the window-evidence test.  Every rank builds the same
deterministic dataset; rank 0 writes a checkpoint (torch.save to memory) every step in
``write_checkpoint``; every batch is preprocessed in the loop (``preprocess``) before the
forward.  Usage: torchrun --nproc_per_node=2 THIS [same|sharded] [STEPS]
``same``: no sampler (every rank reads the same batches); ``sharded``: a DistributedSampler."""

import io
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Ramp(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        return torch.full((64,), float(i)), i % 10


def preprocess(x):
    out = x
    for _ in range(2000):  # python-level augmentation, one small op at a time (~15 ms a batch)
        out = out * 0.999 + 0.001
    return out


def write_checkpoint(model, blob):
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "blob": blob}, buf)
    return buf.tell()


def main(mode: str, steps: int) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Ramp()
    sampler = DistributedSampler(data, shuffle=False) if mode == "sharded" else None
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    blob = torch.randn(12_000_000)  # 48 MB: ~25 ms a save
    for i, (x, y) in enumerate(loader):
        x = preprocess(x)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            write_checkpoint(model, blob)
        if i + 1 >= steps:
            break
    dist.barrier()  # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "same", int(sys.argv[2]) if len(sys.argv) > 2 else 30)
