"""A DDP job (gloo, CPU) that marks its profiled window itself: 6 steps, 3 inside
`ddpdoctor.capture.window()`, 3 more (tests/capture/test_env_switch.py)."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpdoctor.capture import window

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))


def train_step():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


for _ in range(6):
    train_step()
with window() as w:
    for _ in range(3):
        train_step()
for _ in range(3):
    train_step()
print(f"rank {dist.get_rank()}: recording={w.recording}", flush=True)
dist.barrier()
dist.destroy_process_group()
