# expect-verdict: imbalance
# expect-rule: category:imbalance
# expect-first-fix: torch.save
"""Cause: rank 0 saves a checkpoint (model + optimizer state, ~40 MB) with ``torch.save``
after every optimizer step. The other rank reaches the next all-reduce first and waits for
rank 0 every step.

The extra-work-on-one-rank finding comes from the `verdict` branch (from the stack sampler of
the `evidence` branch); until then IM001 may report a straggler with unattributed time. The
header names the category and the substring of the first fix ("rank 0 spends … in torch.save").

    torchrun --standalone --nproc_per_node=2 examples/scenarios/rank0_checkpoint_every_step.py
"""

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def save_checkpoint(model, opt, step, folder):
    path = os.path.join(folder, "last.pt")
    torch.save({"step": step, "model": model.module.state_dict(), "optimizer": opt.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(512, 1536), torch.nn.ReLU(), torch.nn.Linear(1536, 1536),
                              torch.nn.ReLU(), torch.nn.Linear(1536, 1536), torch.nn.ReLU(), torch.nn.Linear(1536, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = TensorDataset(torch.randn(4096, 512), torch.randint(0, 10, (4096,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, drop_last=True)
    step = 0
    with tempfile.TemporaryDirectory(prefix="ckpt_") as folder:
        for epoch in range(1000):
            sampler.set_epoch(epoch)
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                if dist.get_rank() == 0:
                    save_checkpoint(model, opt, step, folder)
                if step >= args.steps:
                    break
            if step >= args.steps:
                break
    dist.barrier()        # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
