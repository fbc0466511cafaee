# expect-verdict: communication
# expect-rule: CM001
# expect-first-fix: bucket_cap_mb
"""Cause: a wide MLP (~12.6 M parameters, 50 MB of fp32 gradients) trained with a small
batch, and every gradient in one 500 MB bucket (``bucket_cap_mb=500``): the all-reduce of all
50 MB starts only when backward has finished, so nothing hides it and the step is mostly
exposed communication.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/comm_one_big_bucket.py
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--bucket-cap-mb", type=float, default=500.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    w = args.width
    net = torch.nn.Sequential(torch.nn.Linear(64, w), torch.nn.ReLU(), torch.nn.Linear(w, w), torch.nn.ReLU(),
                              torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, w), torch.nn.ReLU(),
                              torch.nn.Linear(w, 10))
    model = DDP(net, bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(1024, 64), torch.randint(0, 10, (1024,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=4, sampler=sampler, drop_last=True)
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
    dist.barrier()        # nothing in flight when gloo tears down: a peer still mid-collective can abort it (SIGABRT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
