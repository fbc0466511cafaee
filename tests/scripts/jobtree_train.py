"""A 2-rank CPU DDP job (gloo) for the job-tree contention test.  Usage:
torchrun --nproc_per_node=2 THIS STEPS [grandchild]
``grandchild``: rank 0 starts a helper process that itself starts a CPU-bound process (a
grandchild of the rank, spinning for the whole run): work of the job's own that the ranks do not
do themselves, which must not be taken for other processes' contention."""

import subprocess
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

SPIN = "import os, time\nparent, end = os.getppid(), time.time() + 300\nwhile os.getppid() == parent and time.time() < end: pass\n"


def main(steps: int, grandchild: bool) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    helper = None
    if grandchild and rank == 0:
        helper = subprocess.Popen(
            [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {SPIN!r}])"]
        )
    torch.manual_seed(0)
    # steps of ~10-20 ms: the 40-step window spans several of the contention readings (one every 0.1 s)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x, y = torch.randn(512, 256), torch.randint(0, 10, (512,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    if helper is not None:
        helper.kill()
        helper.wait()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), len(sys.argv) > 2 and sys.argv[2] == "grandchild")
