# expect-verdict: failure
# expect-rule: FL010
# expect-first-fix: -
"""Cause: samples are dict records loaded from a JSON-lines export; one record (index 85) was
written without its ``"label"`` field. The custom ``collate_fn`` reads ``r["label"]`` from every
record. With ``DistributedSampler(shuffle=False)`` and batch size 8, record 85 lands in rank 1's
batch at step 5, so rank 1 raises ``KeyError: 'label'`` inside the collate (inside
``next(loader)``, ``num_workers=0``) and dies. Rank 0 has already entered the gradient
all-reduce of step 5 and loses its peer: its error (connection closed / reset, or the
watchdog) is a symptom; the root cause is rank 1's KeyError.

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times as they
happen, so you see rank 1 stop at step 5 with the KeyError traceback; ``--skip-bad`` filters
records without a label when loading (ablation: the run completes).

    torchrun --standalone --nproc_per_node=2 examples/scenarios/keyerror_collate_rank1.py --report
"""

import argparse
import datetime
import json
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

BAD_INDEX = 85


def write_export(path, n=512):
    g = torch.Generator().manual_seed(0)
    with open(path, "w") as f:
        for i in range(n):
            rec = {"id": i, "features": torch.randn(32, generator=g).tolist(), "label": i % 3}
            if i == BAD_INDEX:
                del rec["label"]  # the broken record
            f.write(json.dumps(rec) + "\n")


def load_records(path, skip_bad):
    with open(path) as f:
        recs = [json.loads(line) for line in f]
    return [r for r in recs if "label" in r] if skip_bad else recs


def collate_records(records):
    x = torch.tensor([r["features"] for r in records])
    y = torch.tensor([r["label"] for r in records])  # KeyError on the broken record
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--skip-bad", action="store_true", help="ablation: drop records without a label")
    p.add_argument("--report", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix=f"export_r{rank}_") as tmp:
        path = os.path.join(tmp, "train.jsonl")
        write_export(path)
        records = load_records(path, args.skip_bad)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Linear(32, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 3),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sampler = DistributedSampler(records, shuffle=False)
    loader = DataLoader(
        records, batch_size=8, sampler=sampler, num_workers=0, drop_last=True, collate_fn=collate_records
    )
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            time.sleep(0.02)  # stands in for a heavier model's compute
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            if args.report:
                print(f"rank {rank} step {step} ms {1000 * (now - t_last):.0f}", flush=True)
            t_last = now
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank} finished {step} steps", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
