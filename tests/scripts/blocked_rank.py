"""Rank 1 stalls in Python at step 7 while rank 0 is blocked inside the gloo all-reduce (C++)."""

import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(100):
    if rank == 1 and i == 7:
        time.sleep(120)
    loss = model(torch.randn(4, 16)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
