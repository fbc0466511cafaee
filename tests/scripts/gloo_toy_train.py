"""A tiny CPU DDP job (gloo) that profiles itself the way users do with
tensorboard_trace_handler.  Rank 1 sleeps before each forward (a straggler); the
dataset sleeps per item (a slow DataLoader).  Usage: torchrun --nproc_per_node=2 THIS OUT_DIR"""

import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

LATE_S = 0.030


class SlowData(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.0004)
        return torch.randn(256), i % 10


def main(out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowData(), batch_size=32)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=4),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(out_dir, worker_name=f"rank{rank}"),
    )
    with prof:
        for i, (x, y) in enumerate(loader):
            if rank == 1:
                time.sleep(LATE_S)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
            if i >= 7:
                break
    dist.barrier()  # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
