# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: -
"""Cause: a small trainer runs callbacks after each optimizer step. The metrics
callback, active on rank 0 only, appends a JSON line to ``metrics.jsonl`` every 8 steps. Someone
removed ``.item()`` from the logged loss "to avoid a device sync every step" (performance
tuning guide advice), so the record holds a 0-d ``torch.Tensor`` and ``json.dumps`` raises
``TypeError: Object of type Tensor is not JSON serializable`` on rank 0 after step 8. Rank 0 exits;
rank 1, which has no metrics callback, goes on into step 9's forward/backward and its gradient
all-reduce loses its peer (connection closed/reset, or the 10 s process-group timeout). Rank 1's
error is the symptom; the root cause is rank 0's ``TypeError`` in the callback. The fix is to
convert on the logging steps only (``float(loss)`` / ``loss.item()`` inside the callback).

Source: Python ``json`` docs (only str/int/float/bool/None/list/dict are serialisable);
PyTorch forums/GitHub issues "Object of type Tensor is not JSON serializable" (e.g. logging
in HuggingFace/Lightning callbacks); the PyTorch performance tuning guide on avoiding
``.item()`` syncs, which is the advice that led to the change.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times as they
happen; ``--fixed`` (ablation) logs ``float(loss)`` and the 40 steps complete.
Measured on 2026-11-28 (torch 2.13.0+cpu, 2-core host shared with ~7 other helpers, load average
~18): both ranks log steps 1-8, then rank 0 raises ``TypeError: Object of type Tensor is not
JSON serializable`` (from ``JsonlMetricsLogger.on_step_end``) and rank 1 fails in step 9 with
``RuntimeError: [.../gloo/transport/tcp/pair.cc:553] Connection closed by peer``, torchrun
reports rank 0 exit 1, rank 1 SIGTERM; 33 s wall. ``--fixed`` trains 40 steps, median step
2.7 / 2.8 ms.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/b5_rank0_callback_json_tensor.py --report
"""

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class JsonlMetricsLogger:
    def __init__(self, path, every, convert):
        self.path, self.every, self.convert = path, every, convert

    def on_step_end(self, step, loss, lr):
        if step % self.every:
            return
        record = {"step": step, "loss": float(loss) if self.convert else loss.detach(), "lr": lr}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


class StepTimer:
    def __init__(self, rank, report):
        self.rank, self.report, self.times, self.t_last = rank, report, [], time.perf_counter()

    def on_step_end(self, step, loss, lr):
        now = time.perf_counter()
        self.times.append(1000 * (now - self.t_last))
        self.t_last = now
        if self.report:
            print(f"rank {self.rank} step {step} ms {self.times[-1]:.1f}", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--report", action="store_true")
    p.add_argument("--fixed", action="store_true", help="ablation: log float(loss)")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    n = 8192
    data = TensorDataset(torch.randn(n, 64), torch.randint(0, 10, (n,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler, drop_last=True)
    timer = StepTimer(rank, args.report)
    callbacks = [timer]
    if rank == 0:
        log_path = os.path.join(tempfile.gettempdir(), f"b5_metrics_{os.getpid()}.jsonl")
        callbacks.append(JsonlMetricsLogger(log_path, every=8, convert=args.fixed))
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            for cb in callbacks:
                cb.on_step_end(step, loss, opt.param_groups[0]["lr"])
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank}: {step} steps, median step {statistics.median(timer.times[5:]):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        os.remove(log_path)


if __name__ == "__main__":
    main()
