# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: use_reentrant
"""Cause: activation checkpointing with the old reentrant implementation
(``torch.utils.checkpoint.checkpoint(block, h, use_reentrant=True)``) in a DDP model built
with ``find_unused_parameters=True`` (it has an auxiliary head that is only sometimes
used). Reentrant checkpointing re-runs each block's forward inside the backward pass, so
DDP's autograd hooks fire for the block's parameters in a way DDP's reducer does not expect
and the first backward dies on every rank with ``RuntimeError: Expected to mark a variable
ready only once``. Non-reentrant checkpointing (``use_reentrant=False``) is supported.

Verify (plain torchrun, no ddpdoctor): the job fails at the first backward with that error
text on both ranks; ``--non-reentrant`` (ablation) trains normally.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/marked_ready_twice.py
"""

import argparse
import datetime

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, h):
        return h + self.fc2(F.gelu(self.fc1(self.norm(h))))


class Net(torch.nn.Module):
    def __init__(self, reentrant, d=64):
        super().__init__()
        self.inp = torch.nn.Linear(32, d)
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(4))
        self.head = torch.nn.Linear(d, 10)
        self.aux_head = torch.nn.Linear(d, 10)          # used on some steps only: hence find_unused_parameters
        self.reentrant = reentrant

    def forward(self, x, with_aux=False):
        h = self.inp(x)
        for block in self.blocks:
            h = checkpoint(block, h, use_reentrant=self.reentrant)
        out = self.head(h)
        return (out, self.aux_head(h)) if with_aux else out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--non-reentrant", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Net(reentrant=not args.non_reentrant), find_unused_parameters=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(4096, 32), torch.randint(0, 10, (4096,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 5 == 0:
                print(f"rank {rank}: step {step} loss {loss.item():.3f}", flush=True)
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
