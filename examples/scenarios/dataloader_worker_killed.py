# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: -
"""Cause: one of rank 1's DataLoader worker processes is killed by a signal mid-epoch, as
the kernel's OOM killer does to the biggest process when host memory runs out. The worker
here decodes variable-size records; when it reaches sample 331 (in rank 1's 11th batch of
16, sequential order) it sends itself ``SIGKILL``, standing in for the OOM killer (this
2-core test host has no memory pressure to produce a real one). Rank 1's main process gets
``RuntimeError: DataLoader worker (pid N) is killed by signal: Killed.`` as soon as the worker
dies (the workers prefetch 2 batches each, so around step 7) and dies; rank 0
then fails in its next gradient all-reduce because its peer is gone.

Verify (plain torchrun, no ddpdoctor): rank 1 prints the DataLoader error, rank 0 a gloo
connection error; ``--no-kill`` (ablation) trains normally.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/dataloader_worker_killed.py
"""

import argparse
import datetime
import os
import signal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

KILL_AT = 331            # a sample of rank 1's 11th batch (DistributedSampler without shuffle: 1, 3, 5, …)


class Records(Dataset):
    def __init__(self, n=4096, kill=True):
        g = torch.Generator().manual_seed(0)
        self.raw = [torch.randn(int(k), generator=g).numpy().tobytes()
                    for k in torch.randint(256, 1024, (n,), generator=g)]
        self.kill = kill

    def __len__(self):
        return len(self.raw)

    def __getitem__(self, i):
        if self.kill and i == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)          # the OOM killer's signal
        x = torch.frombuffer(bytearray(self.raw[i]), dtype=torch.float32)
        x = F.interpolate(x[None, None], size=512, mode="linear", align_corners=False)[0, 0]
        return x, i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--no-kill", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Records(kill=not args.no_kill)
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=2, drop_last=True, persistent_workers=True)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            print(f"rank {rank}: step {step} loss {loss.item():.3f}", flush=True)
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
