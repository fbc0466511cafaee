"""What `ddpdoctor run --watch` costs a healthy job (issue 38): interleaved pairs of the same 2-rank CPU/gloo
job (tests/scripts/watch_train.py, 600 steps) run plainly under torchrun and under `ddpdoctor run --watch
--no-analyze`, alternating which goes first in each pair.  The measure is the job's own training time (rank 0
prints ``train_s`` from step 20 to its last step: the launcher's start-up and the interpreter's end are not the
watch's), plus each command's whole wall time; the ratio is watched/plain, per pair and of the medians.  Also
reports the watch's own time per step as the ranks measured it (watch.json ``overhead``).

    python benchmarks/watch_overhead.py [--pairs 6] [--steps 600]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "watch_train.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def one(watched: bool, steps: int, tmp: Path, i: int) -> tuple[float, float, dict | None]:
    job = [*TORCHRUN, str(SCRIPT), "--steps", str(steps)]
    out = tmp / f"w{i}"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--watch", "--no-analyze", "--out", str(out), "--", *job]
    t0 = time.perf_counter()
    res = subprocess.run(cmd if watched else job, env=_env(), capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"run failed ({res.returncode}): {res.stderr[-2000:]}")
    m = re.search(r"train_s ([0-9.]+)", res.stdout)
    if not m:
        raise SystemExit(f"no train_s in the job's output: {res.stdout[-500:]}")
    w = json.loads((out / "watch.json").read_text()) if watched else None
    return float(m.group(1)), wall, w


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("--steps", type=int, default=600)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="watch-bench-") as d:
        tmp = Path(d)
        for i in range(args.pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {w: one(w, args.steps, tmp, i) for w in order}
            (p_train, p_wall, _), (w_train, w_wall, w) = got[False], got[True]
            incidents = len(w["incidents"]) if w else None
            share = (w or {}).get("overhead", {}).get("share_of_step")
            rows.append((p_train, w_train, p_wall, w_wall, incidents, share))
            print(
                f"pair {i + 1}: train plain {p_train:.2f} s, watched {w_train:.2f} s ({w_train / p_train:.3f}x); "
                f"wall {p_wall:.1f} / {w_wall:.1f} s; incidents {incidents}; watch's own share {share}",
                flush=True,
            )
    ratios = [w / p for p, w, *_ in rows]
    med_ratio = statistics.median([r[1] for r in rows]) / statistics.median([r[0] for r in rows])
    wall_ratio = statistics.median([r[3] for r in rows]) / statistics.median([r[2] for r in rows])
    print(
        f"training time watched/plain: median of pair ratios {statistics.median(ratios):.3f}x "
        f"(range {min(ratios):.3f}-{max(ratios):.3f}), ratio of medians {med_ratio:.3f}x; "
        f"whole command {wall_ratio:.3f}x; watch's own share of step time (in the ranks) "
        f"{statistics.median([r[5] for r in rows if r[5] is not None]) * 100:.2f} %"
    )


if __name__ == "__main__":
    main()
