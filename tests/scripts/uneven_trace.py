"""A 2-rank CPU DDP job (gloo) whose rank 1 records many more profiler events per step than rank 0
(OPS small tensor ops a step), so rank 1's trace takes seconds longer to stop and export after the
window while rank 0 has already finished.  Usage: torchrun --nproc_per_node=2 THIS [OPS]"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(ops: int) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    for _ in range(200):
        if rank == 1:
            t = torch.ones(8)
            for _ in range(ops):
                t = t * 0.999
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4000)
