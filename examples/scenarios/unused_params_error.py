# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: find_unused_parameters
"""Cause: the model has a branch that the forward pass does not use (a ``decoder`` kept for
a reconstruction loss that is switched off in this run), and DDP is built with the default
``find_unused_parameters=False``. The decoder's parameters never get gradients, so DDP's
reducer never finishes the first step's reduction, and the second forward fails on every
rank with ``RuntimeError: Expected to have finished reduction in the prior iteration
before starting a new one``.

Verify (plain torchrun, no ddpdoctor): the job fails at step 2's forward with that error
text on both ranks; ``--recon-weight 0.1`` uses the decoder (ablation: trains normally).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/unused_params_error.py
"""

import argparse
import datetime

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class AutoEncoderClassifier(torch.nn.Module):
    def __init__(self, recon_weight):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
        self.decoder = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
        self.classifier = torch.nn.Linear(32, 10)
        self.recon_weight = recon_weight

    def forward(self, x):
        z = self.encoder(x)
        logits = self.classifier(z)
        if self.recon_weight > 0:
            return logits, self.decoder(z)
        return logits, None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--recon-weight", type=float, default=0.0)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(AutoEncoderClassifier(args.recon_weight))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, drop_last=True)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            logits, recon = model(x)
            loss = F.cross_entropy(logits, y)
            if recon is not None:
                loss = loss + args.recon_weight * F.mse_loss(recon, x)
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
