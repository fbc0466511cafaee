"""Wall-time overhead of `ddpdoctor run` against the same torchrun command without it.

Both variants run the same example for the same number of steps (`--keep-going`, so the
ranks are not stopped after the recorded window); runs are interleaved and the median of
several repetitions is compared.  Usage:

    python benchmarks/bench_run_overhead.py [--example slow_rank] [--steps 20] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str]) -> float:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if res.returncode != 0:
        sys.exit(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-2000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", default="slow_rank")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--active", type=int, default=5)
    args = ap.parse_args()
    train = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(ROOT / "examples" / f"{args.example}.py"),
        "--steps",
        str(args.steps),
    ]
    plain, captured = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.reps):
            plain.append(timed(train))
            out = Path(tmp) / f"b{i}"
            captured.append(
                timed(
                    [
                        sys.executable,
                        "-m",
                        "ddpdoctor",
                        "run",
                        "--out",
                        str(out),
                        "--no-analyze",
                        "--keep-going",
                        "--warmup",
                        str(args.warmup),
                        "--active",
                        str(args.active),
                        "--",
                        *train,
                    ]
                )
            )
            print(f"rep {i + 1}: plain {plain[-1]:.2f} s, ddpdoctor run {captured[-1]:.2f} s", flush=True)
    p, c = statistics.median(plain), statistics.median(captured)
    print(
        f"{args.example}, 2 ranks, {args.steps} steps ({args.warmup} warm-up + {args.active} recorded): "
        f"plain median {p:.2f} s, with ddpdoctor run {c:.2f} s -> overhead {c - p:+.2f} s ({(c - p) / p:+.1%})"
    )


if __name__ == "__main__":
    main()
