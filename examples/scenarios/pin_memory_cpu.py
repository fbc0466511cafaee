# expect-verdict: compute
# expect-rule: CP001
# expect-first-fix: -
# expect-absent: DL002
"""Healthy: ``pin_memory=True`` on a CPU-only job. Pinning only matters for host-to-device
copies; with no accelerator PyTorch ignores it (with a warning). No pageable-copy or input
finding may be raised; the step is spent computing.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/pin_memory_cpu.py
"""

import argparse
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),             # each sample: a 512-point signal
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(4096, 512), torch.randint(0, 10, (4096,)))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=384, sampler=sampler, drop_last=True, pin_memory=True)
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
