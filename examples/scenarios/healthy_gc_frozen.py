# expect-verdict: compute
# expect-rule: CP001
# expect-first-fix: -
# expect-absent: IM004 IM001
"""Healthy, must NOT be flagged: a balanced 1-D CNN job (no imbalance) with a DistributedSampler
(``set_epoch`` every epoch) that builds a large Python-object index of its dataset at setup
(per-sample metadata dicts, ~100 k tracked containers on every rank), then calls
``gc.collect(); gc.freeze()`` so the cyclic garbage collector never walks that setup data
again. Both ranks do the same work; any step-time spread is noise.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints per-rank step times and the
number of full (generation-2) collections during training (expected 0 or 1 and short).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/healthy_gc_frozen.py --report
"""

import argparse
import datetime
import gc
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class IndexedSignals(Dataset):
    def __init__(self, n=8192):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 512, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.meta = [{"id": i, "source": f"sensor-{i % 97}", "tags": [i % 3, i % 5], "spans": [[0, 256], [256, 512]]}
                     for i in range(n)]

    def __len__(self):
        return len(self.meta)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class FullGcCounter:
    def __init__(self):
        self.count, self.ms, self._t0 = 0, 0.0, 0.0

    def __call__(self, phase, info):
        if info["generation"] == 2:
            if phase == "start":
                self._t0 = time.perf_counter()
            else:
                self.count += 1
                self.ms += 1000 * (time.perf_counter() - self._t0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Unflatten(1, (1, 512)),
                              torch.nn.Conv1d(1, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.Conv1d(32, 32, 5, padding=2), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = IndexedSignals()
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=128, sampler=sampler, drop_last=True)
    gc.collect()
    gc.freeze()                        # setup objects move to the permanent generation
    counter = FullGcCounter()
    gc.callbacks.append(counter)
    times = []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
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
        print(f"rank {rank} step ms: " + " ".join(f"{1000 * t:.0f}" for t in times)
              + f"; full collections {counter.count} ({counter.ms:.0f} ms)", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
