"""Accelerate job: accelerator.prepare / accelerator.accumulate, launched with
`accelerate launch`.  Injected cause: DistributedDataParallelKwargs(find_unused_parameters=True)
although every parameter is used.  Gradient accumulation: 4 micro-batches per step."""

import sys

import torch
from accelerate import Accelerator, DistributedDataParallelKwargs
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    torch.set_num_threads(1)
    accelerator = Accelerator(
        gradient_accumulation_steps=4,
        cpu=True,
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
    )
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(4096, 32, generator=g), torch.randn(4096, 1, generator=g))
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, loader = accelerator.prepare(model, opt, DataLoader(ds, batch_size=8))
    done = 0
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
        if accelerator.sync_gradients:
            done += 1
            if done >= steps:
                break
