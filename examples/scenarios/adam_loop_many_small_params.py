# expect-verdict: compute
# expect-rule: category:compute
# expect-first-fix: foreach
"""Cause: Adam's per-parameter for-loop over 3,000 small tensors. A wide tabular click
model gives each of its 1,500 categorical fields its own small embedding table and its own
per-field scale vector: 3,000 parameter tensors of a few dozen numbers each (~160 K
parameters in all). ``torch.optim.Adam`` picks its implementation from where the tensors
live: on CPU the default is the single-tensor for-loop (``foreach`` is only the default for
CUDA tensors), so every ``optimizer.step()`` runs ~10 small ATen ops per parameter
(``add_``, ``mul_``, ``lerp_``/``addcmul_``, ``sqrt``, ``div_``, ``addcdiv_``, …): ~30,000
tiny ops. The forward and backward touch each table once per step (one gather per field,
batched over the whole batch), so the optimizer step is most of the step.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's median forward,
backward and optimizer-step times; ``--foreach`` (ablation) builds
``Adam(..., foreach=True)``, which updates all 3,000 tensors with a few ``_foreach_*`` ops.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/adam_loop_many_small_params.py
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FIELDS = 1500
VOCAB = 12
DIM = 4


class WideFieldModel(nn.Module):
    """One embedding table and one scale vector per categorical field, then a small MLP."""

    def __init__(self):
        super().__init__()
        self.tables = nn.ParameterList(nn.Parameter(torch.randn(VOCAB, DIM) * 0.1) for _ in range(FIELDS))
        self.scales = nn.ParameterList(nn.Parameter(torch.ones(DIM)) for _ in range(FIELDS))
        self.head = nn.Sequential(nn.Linear(FIELDS * DIM, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, ids):
        # ids: [batch, FIELDS]; all lookups at once through one concatenated table
        table = torch.stack([t * s for t, s in zip(self.tables, self.scales)])  # [FIELDS, VOCAB, DIM]
        rows = table[torch.arange(FIELDS), ids]  # [batch, FIELDS, DIM]
        return self.head(rows.flatten(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--foreach", action="store_true", help="ablation: Adam(foreach=True)")
    p.add_argument("--fused", action="store_true", help="ablation: Adam(fused=True)")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(WideFieldModel())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True if args.foreach else None, fused=True if args.fused else None)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randint(0, VOCAB, (4096, FIELDS), generator=g), torch.randint(0, 2, (4096,), generator=g))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler, drop_last=True)
    step, fwd, bwd, opt_t = 0, [], [], []
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for ids, y in loader:
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(ids), y)
            t1 = time.perf_counter()
            opt.zero_grad()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            opt_t.append(t3 - t2)
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        med = lambda v: 1000 * sorted(v[5:])[len(v[5:]) // 2]
        print(f"rank {rank} params {len(list(model.parameters()))} median ms: forward {med(fwd):.1f} "
              f"backward {med(bwd):.1f} optimizer step {med(opt_t):.1f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
