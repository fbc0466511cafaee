# expect-verdict: compute
# expect-rule: CP002
# expect-first-fix: -
"""Cause: a sequence model steps a small GRU-like cell through 200 time steps in a Python
``for`` loop, with a hand-written gate computation (several tiny matmuls, sigmoids and
element-wise ops per time step) on a batch of 8 and hidden size 32. Each op does a few
microseconds of arithmetic, but each costs the Python interpreter and the PyTorch dispatcher
(and autograd bookkeeping) far more than that, so the step time is the host's per-op overhead,
not arithmetic: thousands of tiny ops per step. The gradient is tiny (~13k parameters), the data
is in memory, both ranks do the same work.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times, samples/s and the
number of autograd ops per step. ``--batch 128`` (16x the samples per op) only ~2.4x the step
time, so most of the time is per-op overhead, not arithmetic; the cure for the host-bound step is
more work per op (ablation: samples/s rises ~7x). ``--fused`` runs the same recurrence with
``torch.nn.GRU``: on CPU that still loops over time steps in C++ (~2800 autograd nodes), and
measured no faster here.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/python_unrolled_rnn_host_bound.py --report
"""

import argparse
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

T, IN, H = 200, 16, 32


class UnrolledGRU(torch.nn.Module):
    """GRU written out by hand, one Python iteration per time step."""

    def __init__(self, fused=False):
        super().__init__()
        self.fused = fused
        self.gru = torch.nn.GRU(IN, H, batch_first=False)  # parameters shared by both paths
        self.head = torch.nn.Linear(H, 4)

    def forward(self, x):  # x: (T, batch, IN)
        if self.fused:
            out, _ = self.gru(x)
            return self.head(out[-1])
        w_ih, w_hh, b_ih, b_hh = self.gru.weight_ih_l0, self.gru.weight_hh_l0, self.gru.bias_ih_l0, self.gru.bias_hh_l0
        h = x.new_zeros(x.shape[1], H)
        for t in range(T):
            gi = F.linear(x[t], w_ih, b_ih)
            gh = F.linear(h, w_hh, b_hh)
            i_r, i_z, i_n = gi.chunk(3, 1)
            h_r, h_z, h_n = gh.chunk(3, 1)
            r = torch.sigmoid(i_r + h_r)
            z = torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            h = (1 - z) * n + z * h
        return self.head(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fused", action="store_true", help="ablation: torch.nn.GRU instead of the Python loop")
    p.add_argument("--batch", type=int, default=8, help="ablation: 128 puts 16x more work in every op")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(UnrolledGRU(args.fused))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    xs = torch.randn(64, T, args.batch, IN, generator=g)
    ys = torch.randint(0, 4, (64, args.batch), generator=g)
    times = []
    ops_per_step = None
    t_last = time.perf_counter()
    for step in range(args.steps):
        x, y = xs[step % 64], ys[step % 64]
        loss = F.cross_entropy(model(x), y)
        if ops_per_step is None:
            seen, stack = set(), [loss.grad_fn]
            while stack:  # count autograd nodes of one step
                fn = stack.pop()
                if fn is None or fn in seen:
                    continue
                seen.add(fn)
                stack.extend(f for f, _ in fn.next_functions)
            ops_per_step = len(seen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = time.perf_counter()
        times.append(now - t_last)
        t_last = now
    if args.report:
        med = 1000 * sorted(times)[len(times) // 2]
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times), flush=True)
        print(
            f"rank {rank} median step {med:.1f} ms, {1000 * args.batch / med:.0f} samples/s, "
            f"autograd ops per step {ops_per_step}, {1000 * med / ops_per_step:.1f} us per op",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
