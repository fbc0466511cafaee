"""The load and latency of `run --watch`'s agreement among ranks at 1,024 and 8,192 ranks (issue 38), simulated.

The agreement (capture/agent/watch.py): each rank's watcher thread does one ``stat`` of the next trigger file
``DIR/watch/trigger-NNN.json`` every 0.5 s (nothing on the step path).  A rank that raises an alarm creates the
file (one exclusive link) naming step S = its step + a lead of about 1.2 s of steps (at least 3).  Every rank
starts recording at S if it sees the trigger before S.

This script does two things:
1. measures the cost of the ``stat`` of a missing file here (the per-step cost on every rank, local disk;
   on a shared filesystem a metadata lookup costs more: the table's load column is what the server sees);
2. simulates N ranks of a synchronous job (a step ends on every rank within the step's jitter of the slowest
   rank, as an all-reduce makes it), one of them raising an alarm at a random moment, and reports the metadata
   operations per second the folder receives, when the last rank saw the trigger, and whether any rank saw it
   only after step S (a missed agreement).  No collective is involved at any rank count: the load grows with N
   (N / step time stats per second), the latency does not.

    python benchmarks/watch_agreement_sim.py [--ranks 1024 8192] [--step-ms 100] [--trials 200]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import tempfile
import time

POLL_S = 0.5
LEAD_S, MIN_LEAD = 1.2, 3


def stat_cost_us(n: int = 20000) -> float:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trigger-001.json")
        t = time.perf_counter()
        for _ in range(n):
            os.path.exists(path)
        return (time.perf_counter() - t) / n * 1e6


def simulate(ranks: int, step_s: float, jitter: float, fs_visibility_s: float, rng: random.Random) -> dict:
    """One trigger: (seconds until the last rank saw it, steps of lead left at that moment (min over ranks))."""
    lead = max(MIN_LEAD, math.ceil(LEAD_S / step_s))
    # each rank's boundary times: a synchronous job ends step k on every rank at k*step + a small per-rank offset
    offsets = [rng.uniform(0, jitter * step_s) for _ in range(ranks)]
    raise_step = rng.randint(200, 400)
    raiser = rng.randrange(ranks)
    t_raise = raise_step * step_s + offsets[raiser]
    visible = t_raise + fs_visibility_s  # when other ranks' stat can see the new file
    s = raise_step + 1 + lead  # the trigger's step S (window.steps after the raising boundary, + lead)
    worst_seen, min_left = 0.0, lead
    for off in offsets:
        phase = rng.uniform(0, POLL_S)  # the rank's watcher polls at phase + i * POLL_S
        t_seen = phase + math.ceil((visible - phase) / POLL_S) * POLL_S
        k = math.ceil((t_seen - off) / step_s)  # the first boundary after its watcher saw the file
        worst_seen = max(worst_seen, t_seen - t_raise)
        min_left = min(min_left, s - (k + 1))
    return {"latency_s": worst_seen, "lead_left": min_left}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, nargs="+", default=[1024, 8192])
    p.add_argument("--step-ms", type=float, nargs="+", default=[20.0, 100.0, 1000.0])
    p.add_argument("--jitter", type=float, default=0.2, help="a rank's boundary lag, as a share of the step")
    p.add_argument(
        "--fs-visibility-ms", type=float, default=50.0, help="NFS attribute-cache delay before a new file is seen"
    )
    p.add_argument("--trials", type=int, default=200)
    args = p.parse_args()
    rng = random.Random(0)
    cost = stat_cost_us()
    print(f"stat of a missing trigger file here: {cost:.2f} µs per poll per rank (every {POLL_S} s, off the step path)")
    print(
        "| ranks | step | stats/s on the folder (watchers) | creates per incident | trigger seen by all (median / max) | lead left at the last rank (min) | missed S |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in args.ranks:
        for step_ms in args.step_ms:
            step_s = step_ms / 1000
            runs = [simulate(n, step_s, args.jitter, args.fs_visibility_ms / 1000, rng) for _ in range(args.trials)]
            lat = [r["latency_s"] for r in runs]
            left = min(r["lead_left"] for r in runs)
            missed = sum(r["lead_left"] < 0 for r in runs)
            load = n / POLL_S
            print(
                f"| {n} | {step_ms:g} ms | {load:,.0f} | 1 (+ up to {n - 1} refused) | "
                f"{statistics.median(lat) * 1000:.0f} / {max(lat) * 1000:.0f} ms | {left} steps | {missed}/{len(runs)} |"
            )


if __name__ == "__main__":
    main()
