# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: tokenizerz
"""Cause: the training script imports a module that is not installed in this environment
(``import tokenizerz``: a typo for a tokenizer package, or a package missing from the
image). Both ranks die with ``ModuleNotFoundError: No module named 'tokenizerz'`` before
the process group is created or any step runs.

Verify (plain torchrun, no ddpdoctor): both ranks print that traceback and torchrun exits
non-zero within seconds.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/import_error_on_start.py
"""

import argparse
import datetime

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import tokenizerz


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    tok = tokenizerz.Tokenizer("bpe-8k")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Embedding(8192, 32), torch.nn.Flatten(), torch.nn.Linear(32 * 16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    texts = [f"example sentence number {i}" for i in range(1024)]
    ids = torch.stack([torch.tensor(tok.encode(t, length=16)) for t in texts])
    data = TensorDataset(ids, torch.randint(0, 2, (len(texts),)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
