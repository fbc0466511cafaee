# expect-verdict: failure
# expect-rule: category:failure
# expect-first-fix: -
"""Cause: a DataLoader worker on rank 1 gets stuck. Each support-ticket record is
validated in ``__getitem__`` with ``VALID_TEXT = re.compile(r"^(\\w+\\s?)+$")`` before
hashing its words into features. The nested quantifier makes Python's backtracking regex
engine exponential on a long run of word characters that ends in a non-word character: record
201 is an export glitch whose text field holds a base64 attachment id (26 characters then
``==``), and matching it takes minutes (the work doubles with each extra character). With
``DistributedSampler(shuffle=False)`` and batch 16 the record lands in rank 1's batch at step 6.
The worker that owns batch 6 spins in ``re.match`` (one core at 100 %). ``re`` holds the GIL
while it matches, so that worker's queue-feeder thread cannot even send batch 4, which it had
already built: rank 1's main process (the DataLoader has no ``timeout``) waits for batch 4
indefinitely. Rank 0 enters step 4's gradient all-reduce and, after the 10 s process-group
timeout, fails with a gloo timeout error; torchrun then terminates rank 1. Rank 0's error is the symptom; the cause is
rank 1's stuck worker (the root fix is a linear-time check, e.g. a possessive/atomic group or
``text.replace(" ", "").isalnum()``, or a length cap; ``DataLoader(timeout=...)`` would at least
name the stuck worker).

Source: Python ``re`` docs (backtracking; possessive quantifiers ``(?>...)``/``*+`` since 3.11);
OWASP "Regular expression Denial of Service - ReDoS" (``^(\\w+\\s?)*$`` is its textbook evil
regex); DataLoader docs (``timeout``: "if positive, the timeout value for collecting a batch
from workers", default 0 = wait forever).

Verify (plain torchrun, no ddpdoctor): ``--report`` prints each rank's step times as they
happen and the time each record's validation took if > 1 s; ``--fixed`` (ablation) validates
with a possessive quantifier (``^(?>\\w+\\s?)+$``, same accept/reject result) and the 40 steps
complete.
Measured on 2026-11-28 (torch 2.13.0+cpu, 2-core host shared with ~7 other helpers, load average
~17): both ranks log steps 0-3; rank 0 then fails in step 4's ``loss.backward()`` with
``RuntimeError: [.../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for
recv operation to complete``, torchrun sends SIGTERM to rank 1 (exit -15), 49 s wall; no
process left behind (checked with ``ps``). ``--fixed`` trains 40 steps, median step 55.4 /
54.5 ms.

    torchrun --standalone --nproc_per_node=2 examples/scenarios/b5_regex_backtracking_stuck_worker.py --report
"""

import argparse
import datetime
import random
import re
import statistics
import time
import zlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

VALID_TEXT = re.compile(r"^(\w+\s?)+$")
VALID_TEXT_ATOMIC = re.compile(r"^(?>\w+\s?)+$")
BAD_INDEX = 201
N_FEATURES = 512
WORDS = "printer login error refund invoice password reset broken slow crash update account billing".split()


def load_tickets(n=4096, seed=0):
    rng = random.Random(seed)
    records = [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))), rng.randrange(4)) for _ in range(n)]
    records[BAD_INDEX] = ("SGVsbG8gV29ybGQxSGVsbG8gV2==", 2)      # attachment id exported as the text
    return records


class Tickets(Dataset):
    def __init__(self, records, pattern, report=False):
        self.records, self.pattern, self.report = records, pattern, report

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        text, label = self.records[i]
        t0 = time.perf_counter()
        if not self.pattern.match(text):
            text = re.sub(r"[^\w\s]", " ", text)
        if self.report and time.perf_counter() - t0 > 1.0:
            print(f"record {i}: validation took {time.perf_counter() - t0:.1f} s", flush=True)
        x = torch.zeros(N_FEATURES)
        for w in text.lower().split():
            x[zlib.crc32(w.encode()) % N_FEATURES] += 1.0
        return x, label


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--report", action="store_true")
    p.add_argument("--fixed", action="store_true", help="ablation: possessive (atomic) group, linear time")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(N_FEATURES, 128), nn.ReLU(), nn.Linear(128, 4)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = Tickets(load_tickets(), VALID_TEXT_ATOMIC if args.fixed else VALID_TEXT, report=args.report)
    sampler = DistributedSampler(data, shuffle=False)
    loader = DataLoader(data, batch_size=16, sampler=sampler, num_workers=2, drop_last=True)
    step_ms = []
    step = 0
    t_last = time.perf_counter()
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            now = time.perf_counter()
            step_ms.append(1000 * (now - t_last))
            if args.report:
                print(f"rank {rank} step {step} ms {step_ms[-1]:.1f}", flush=True)
            t_last = now
            step += 1
            if step >= args.steps:
                break
        if step >= args.steps:
            break
    if args.report:
        print(f"rank {rank}: {step} steps, median step {statistics.median(step_ms[5:]):.1f} ms", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
