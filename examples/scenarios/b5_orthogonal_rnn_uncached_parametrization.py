# expect-verdict: compute
# expect-rule: category:compute
# expect-first-fix: cached
"""Cause: a sensor-sequence classifier with an orthogonal recurrent matrix (a common trick
against exploding/vanishing gradients): ``nn.utils.parametrizations.orthogonal(cell.hh,
"weight")``. A parametrized weight is recomputed from its unconstrained original *every time
it is accessed* (here a ``matrix_exp`` of a 96x96 skew-symmetric matrix), and the Elman cell
reads ``hh.weight`` once per time step: 40 matrix exponentials in the forward pass and 40
matrix-exponential backwards per sequence batch, instead of one. Both ranks do the same work
and the data is in memory; the all-reduce is ~11 K values: compute-bound (wasted recomputation
in forward/backward). The fix is to run the forward under ``torch.nn.utils.parametrize.cached()``
(the parametrized weight is computed once per forward), which the parametrizations tutorial
recommends exactly for RNN weights.

Source: PyTorch tutorial "Parametrizations Tutorial", section "Caching the value of a
parametrization" ("...when using a parametrized weight in a recurrent network, use
``with parametrize.cached():``"); ``torch.nn.utils.parametrize.cached`` docs.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank median step time and
median forward time; ``--fixed`` (ablation) runs forward under ``parametrize.cached()`` (same
math).
Measured on 2026-11-28 (torch 2.13.0+cpu, 2-core host shared with ~7 other helpers, load average
~13): median step 441.8 / 435.9 ms (rank 0 / rank 1), forward 103.8 / 100.2 ms; ``--fixed``
50.2 / 53.3 ms, forward 10.3 / 14.0 ms: 8.5x. Default run 46 s wall (first 10 steps ~4.5 s
after start-up).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/b5_orthogonal_rnn_uncached_parametrization.py --report
"""

import argparse
import contextlib
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

N_CHANNELS, HIDDEN, SEQ_LEN, N_CLASSES = 12, 96, 40, 6


class OrthogonalRNNClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.ih = nn.Linear(N_CHANNELS, HIDDEN)
        self.hh = nn.Linear(HIDDEN, HIDDEN, bias=False)
        nn.utils.parametrizations.orthogonal(self.hh, "weight")
        self.head = nn.Linear(HIDDEN, N_CLASSES)

    def forward(self, x):                        # x: (batch, time, channels)
        h = torch.zeros(x.shape[0], HIDDEN)
        for t in range(x.shape[1]):
            h = torch.tanh(self.ih(x[:, t]) + self.hh(h))   # reads hh.weight: recomputed each step
        return self.head(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--report", action="store_true")
    p.add_argument("--fixed", action="store_true", help="ablation: forward under parametrize.cached()")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(OrthogonalRNNClassifier())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    n = 8192
    data = TensorDataset(torch.randn(n, SEQ_LEN, N_CHANNELS), torch.randint(0, N_CLASSES, (n,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler, drop_last=True)
    step_ms, fwd_ms = [], []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            t0 = time.perf_counter()
            with parametrize.cached() if args.fixed else contextlib.nullcontext():
                loss = F.cross_entropy(model(x), y)
            fwd_ms.append(1000 * (time.perf_counter() - t0))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            now = time.perf_counter()
            step_ms.append(1000 * (now - t_last))
            t_last = now
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        n_params = sum(q.numel() for q in model.parameters())
        print(f"rank {rank}: {n_params} parameters; median step {statistics.median(step_ms[5:]):.1f} ms, "
              f"median forward {statistics.median(fwd_ms[5:]):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
