"""A single-process training loop (no torch.distributed) with bf16 autocast on CPU."""

import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(64, 10)
opt = torch.optim.Adam(model.parameters())
dl = DataLoader(TensorDataset(torch.randn(2048, 64), torch.randint(0, 10, (2048,))), batch_size=32, shuffle=True)
for i, (x, y) in enumerate(dl):  # noqa: B007 - the step count is printed after the loop
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("finished all", i + 1, "steps")
