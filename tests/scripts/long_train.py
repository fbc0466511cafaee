"""A 2-rank CPU DDP job (gloo) that trains until it is stopped (STEPS steps of ~STEP_S each), for the
interrupt tests: `ddpdoctor run --keep-going` records a window, then Ctrl-C arrives while it trains on.
Usage: torchrun --nproc_per_node=2 THIS [STEPS] [STEP_S]"""

import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(steps: int, step_s: float) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    for _ in range(steps):
        time.sleep(step_s)  # the data loading of a real job
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000, float(sys.argv[2]) if len(sys.argv) > 2 else 0.05)
