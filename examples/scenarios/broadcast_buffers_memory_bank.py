# expect-verdict: communication
# expect-rule: CM001
# expect-first-fix: broadcast_buffers
"""Cause: a MoCo-style contrastive model keeps a large memory bank of past embeddings
(262144 x 128 floats, 128 MiB) as a registered *buffer*. DDP's default ``broadcast_buffers=True``
broadcasts every buffer from rank 0 to all ranks at the start of every forward, so each step
ships 128 MiB over the network before any compute starts. That broadcast cannot overlap with
anything (it runs before the forward), and it dwarfs the small gradient all-reduce (~0.4 MiB of
parameters). Each rank only enqueues its own keys, so the broadcast is also wrong for the
model: it overwrites rank 1's queue with rank 0's.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and the time of
the forward call (which holds the buffer broadcast); ``--no-broadcast-buffers`` builds DDP with
``broadcast_buffers=False`` (ablation).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/broadcast_buffers_memory_bank.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

BANK, DIM = 262144, 128


class ContrastiveWithBank(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, DIM))
        self.register_buffer("bank", F.normalize(torch.randn(BANK, DIM), dim=1))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        q = F.normalize(self.encoder(x), dim=1)
        k = F.normalize(self.encoder(x + 0.1 * torch.randn_like(x)), dim=1).detach()
        pos = (q * k).sum(1, keepdim=True)
        neg = q @ self.bank[:8192].clone().t()  # negatives from the bank
        logits = torch.cat([pos, neg], 1) / 0.07
        with torch.no_grad():  # enqueue this rank's keys
            n = k.shape[0]
            start = int(self.ptr)
            self.bank[start : start + n] = k
            self.ptr.fill_((start + n) % BANK)
        return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--no-broadcast-buffers", action="store_true", help="ablation: broadcast_buffers=False")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(ContrastiveWithBank(), broadcast_buffers=not args.no_broadcast_buffers)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = TensorDataset(torch.randn(8192, 256))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, drop_last=True)
    times, fwd = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for (x,) in loader:
            t0 = time.perf_counter()
            loss = model(x)
            fwd.append(time.perf_counter() - t0)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            now = time.perf_counter()
            times.append(now - t_last)
            t_last = now
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        med = lambda v: 1000 * sorted(v)[len(v) // 2]  # noqa: E731
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        print(
            f"rank {rank} forward (incl. buffer broadcast) ms: " + " ".join(f"{1000 * t:.0f}" for t in fwd), flush=True
        )
        print(f"rank {rank} median step {med(times):.1f} ms, median forward {med(fwd):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
