"""The truth table of `run --try` (issue 37 item 3): each (job, change) measured by `ddpdoctor run --try` at
its defaults, against long plain runs of both settings whose step times the job measures itself.

For every row: ``ddpdoctor run --try CHANGE -- torchrun --standalone --nproc_per_node=2 JOB`` (its defaults:
warm-up, window, repeats) and, interleaved (A B A B …), plain ``torchrun … JOB --report --steps N`` with the
job's own argument for each setting (``--workers 4`` / ``--workers 14``). A plain run's job step is the slowest
rank's (every rank waits for it in DDP); its first ``--drop`` share of steps is left out (the start: a loader's
prefetched buffer, first-touch allocations), the rest pooled over its repeats. The long-run ratio is
mean(baseline step) / mean(changed step). A row agrees when the trial's 95 % interval holds the long-run
ratio or lies on the same side of 1; a trial that said "not steady" made no claim and is counted so.

    python benchmarks/truth_table.py [--only NAME] [--pairs 2] [--steps 240] [--trials 1] [--note TEXT]

Writes docs/TRUTH_TABLE.md (the table, each command, the date, the commit and the host's load) and
docs/truth_table.json (every number). Slow: every row is several captures and 2 x pairs long runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DOC, DATA = ROOT / "docs" / "TRUTH_TABLE.md", ROOT / "docs" / "truth_table.json"
TORCHRUN = ["torchrun", "--standalone", "--nproc_per_node=2"]
STEP_LINE = re.compile(r"rank (\d+) step ms: (.*)")


@dataclass
class Row:
    name: str
    what: str  # the job's bottleneck, in words
    job: str
    change: str  # `--try` setting
    base_args: list[str]  # the job's own arguments for each setting in a plain run
    try_args: list[str]


ROWS = [
    Row(
        "lock_bound_workers",
        "loader bound by one lock per sample (more workers cannot help)",
        "examples/scenarios/loader_lock_bound_workers4.py",
        "dataloader.num_workers=14",
        ["--workers", "4"],
        ["--workers", "14"],
    ),
    Row(
        "io_wait_workers",
        "loader waiting on storage (more workers overlap the waits)",
        "examples/scenarios/io_wait_loader_workers2.py",
        "dataloader.num_workers=8",
        ["--workers", "2"],
        ["--workers", "8"],
    ),
]


def plain_run(row: Row, args: list[str], steps: int) -> list[list[float]]:
    """One long plain run: each rank's step times (ms) as the job printed them (each rank's stdout in a file
    of its own: torchrun's merged stdout interleaves the ranks' lines)."""
    with tempfile.TemporaryDirectory(prefix="ddpdoctor-truth-logs-") as logs:
        cmd = TORCHRUN + ["--log-dir", logs, "--redirects", "1", row.job, "--report", "--steps", str(steps)] + args
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(Path(logs).glob("**/stdout.log")))
    ranks = {int(m[1]): [float(x) for x in m[2].split()] for m in STEP_LINE.finditer(text)}
    if not ranks:
        raise RuntimeError(f"{' '.join(cmd)}: no step times printed (exit {out.returncode})\n{out.stderr[-2000:]}")
    return [ranks[r] for r in sorted(ranks)]


def job_steps(ranks: list[list[float]], drop: float) -> list[float]:
    """The job's step: the slowest rank's; the first `drop` share of the run left out."""
    n = min(len(r) for r in ranks)
    job = [max(r[i] for r in ranks) for i in range(n)]
    return job[int(round(drop * n)) :]


def try_run(row: Row, out: Path) -> dict:
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--try", row.change, "--out", str(out), "--", *TORCHRUN, row.job]
    subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    return json.loads((out / "trial.json").read_text(encoding="utf-8"))


def agrees(trial: dict, long_ratio: float) -> str:
    if trial.get("not_steady"):
        return "no claim (not steady)"
    ci = trial.get("ci95")
    if not ci:
        return "no measurement"
    lo, hi = ci
    if lo <= long_ratio <= hi:
        return "yes (holds it)"
    same = (lo > 1 and long_ratio > 1) or (hi < 1 and long_ratio < 1) or (lo <= 1 <= hi and abs(long_ratio - 1) < 0.05)
    return "yes (same side of 1)" if same else "NO"


def measure(row: Row, pairs: int, steps: int, trials: int, drop: float, tmp: Path) -> dict:
    base, treat = [], []
    for _ in range(pairs):  # interleaved: a drift of the shared host hits both settings
        base += job_steps(plain_run(row, row.base_args, steps), drop)
        treat += job_steps(plain_run(row, row.try_args, steps), drop)
    long_ratio = float(np.mean(base) / np.mean(treat))
    tries = [try_run(row, tmp / f"{row.name}-try{i}") for i in range(trials)]
    return {
        "row": row.__dict__,
        "long_run": {
            "ratio": round(long_ratio, 3),
            "baseline_mean_ms": round(float(np.mean(base)), 2),
            "try_mean_ms": round(float(np.mean(treat)), 2),
            "steps_each": [len(base), len(treat)],
        },
        "trials": [
            {
                k: t.get(k)
                for k in ("measured_speedup", "ci95", "median_speedup", "not_steady", "steady", "repeats_per_arm")
            }
            | {"agrees": agrees(t, long_ratio)}
            for t in tries
        ],
    }


def _commands(row: Row, steps: int) -> list[str]:
    plain = " ".join(TORCHRUN + [row.job, "--report", "--steps", str(steps)])
    return [
        f"ddpdoctor run --try {row.change} -- {' '.join(TORCHRUN)} {row.job}",
        f"{plain} {' '.join(row.base_args)}",
        f"{plain} {' '.join(row.try_args)}",
    ]


def write_doc(results: list[dict], note: str, steps: int, pairs: int, drop: float) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Truth table: `run --try` at its defaults against long plain runs",
        "",
        f"Made by `python benchmarks/truth_table.py` on {when}, commit {commit.stdout.strip()}, 1-minute load "
        f"average {load:.1f} on the host when written. Long runs: {pairs} interleaved pairs of {steps} steps per "
        f"setting, the first {100 * drop:.0f} % of each run left out, job step = slowest rank's. {note}".rstrip(),
        "",
        "| job | change | long-run ratio | `--try` (95 %) | median step | agrees |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        row, lr = r["row"], r["long_run"]
        for t in r["trials"]:
            ci = t.get("ci95")
            shown = f"{t['measured_speedup']:.2f}x ({ci[0]:.2f}–{ci[1]:.2f})" if ci else "none"
            if t.get("not_steady"):
                shown += ", not steady: " + ", ".join(t["not_steady"])
            med = f"{t['median_speedup']:.2f}x" if t.get("median_speedup") else "none"
            lines.append(
                f"| {row['name']} ({row['what']}) | `{row['change']}` | {lr['ratio']:.2f}x "
                f"({lr['baseline_mean_ms']:.0f} → {lr['try_mean_ms']:.0f} ms) | {shown} | {med} | {t['agrees']} |"
            )
    lines += ["", "Commands (from the repository's root):", ""]
    for r in results:
        lines += [f"- {r['row']['name']}:"] + [f"  - `{c}`" for c in _commands(Row(**r["row"]), steps)]
    DOC.write_text("\n".join(lines) + "\n", encoding="utf-8")
    DATA.write_text(json.dumps(results, indent=1), encoding="utf-8")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", action="append", help="row name (repeatable)")
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--steps", type=int, default=240)
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--drop", type=float, default=0.25)
    p.add_argument("--note", default="")
    a = p.parse_args()
    rows = [r for r in ROWS if not a.only or r.name in a.only]
    results = []
    with tempfile.TemporaryDirectory(prefix="ddpdoctor-truth-") as tmp:
        for row in rows:
            print(f"truth table: {row.name} ({row.change})", flush=True)
            results.append(measure(row, a.pairs, a.steps, a.trials, a.drop, Path(tmp)))
            print(json.dumps(results[-1]["long_run"]), [t["agrees"] for t in results[-1]["trials"]], flush=True)
    write_doc(results, a.note, a.steps, a.pairs, a.drop)


if __name__ == "__main__":
    main()
