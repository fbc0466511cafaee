"""A 2-rank CPU DDP job (gloo) for the torch.compile test: the DDP model is compiled with
``torch.compile(..., backend="aot_eager", dynamic=False)`` (aot_eager needs no C compiler).
Usage: torchrun --nproc_per_node=2 THIS [recompile|static] [STEPS]
``recompile``: every step's batch has a new sequence length, so Dynamo recompiles each step
(until its recompile limit); ``static``: one fixed length, compiled once at the first step."""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Pool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):  # x: (batch, length, 16)
        return self.head(torch.nn.functional.gelu(self.inner(x)).mean(1))


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "recompile"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.compile(DDP(Pool()), backend="aot_eager", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        length = 8 + step if mode == "recompile" else 8
        x, y = torch.randn(8, length, 16), torch.randint(0, 4, (8,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
