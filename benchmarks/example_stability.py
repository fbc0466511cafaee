"""How stable is the card on the bundled examples? (issue 41: "the same verdict in >= 9 of 10 runs, idle and
beside a CPU burner, never 'high' on a flip; the first fix of every example predicted > 1.05x").

Records each example under examples/ that is not a failure N times idle and N times beside one process spinning
on a core (`ddpdoctor run --no-analyze --out DIR -- torchrun --standalone --nproc_per_node=2 examples/X.py`),
analyzes every recording with this checkout's code, and writes a table: per example and condition, the verdicts
and how often each came, the confidence labels of the verdicts that were not the majority (a "high" there is a
flip said with certainty), the card's first fix ("Fix first [RULE]: title", as printed) and how often, and the
predicted speed-up stored with that fix when `run --try` can apply it.

    python benchmarks/example_stability.py --runs 10 --keep /tmp/stab          # idle and busy, writes docs/STABILITY.md
    python benchmarks/example_stability.py --reanalyze /tmp/stab --out -      # the kept recordings, this code

The host's load average is printed with the table: "idle" means nothing of the benchmark's own burns a core.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import CpuBurner  # (benchmarks/ is a folder of scripts, not a package)

EXAMPLES = ("heavy_compute", "comm_heavy", "slow_loader", "io_wait_loader", "slow_rank")
JOB_TIMEOUT_S = 300
FIX_FIRST = re.compile(r"^Fix first \[(?P<rule>[A-Z]+\d+)\]: (?P<title>.*)$")


def _ddpdoctor() -> list[str]:
    return [sys.executable, "-m", "ddpdoctor"]


def record(example: str, folder: Path, busy: bool) -> str:
    """One recording into ``folder``; '' or what went wrong."""
    cmd = _ddpdoctor() + ["run", "--no-analyze", "--out", str(folder), "--", "torchrun", "--standalone"]
    cmd += ["--nproc_per_node=2", str(ROOT / "examples" / f"{example}.py")]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # torchrun
    with CpuBurner(busy):
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, cwd=folder.parent, env=env)
        except subprocess.TimeoutExpired:
            return f"timeout after {JOB_TIMEOUT_S} s"
    if res.returncode != 0 and not (folder / "ranks").is_dir():
        return f"run exit {res.returncode}: {(res.stderr.strip().splitlines() or [''])[-1]}"
    return ""


def read_card(folder: Path) -> dict:
    """The verdict, its confidence, and the card's first fix with its stored prediction."""
    with tempfile.TemporaryDirectory() as tmp:
        js = Path(tmp) / "d.json"
        res = subprocess.run(
            _ddpdoctor() + ["analyze", "--json", str(js), str(folder)],
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT_S,
            env={**os.environ, "COLUMNS": "300"},  # the card's width: the first fix's title on one line
        )
        if not js.is_file():
            return {"error": f"analyze exit {res.returncode}: {res.stderr.strip()[-200:]}"}
        d = json.loads(js.read_text(encoding="utf-8"))
    v = d.get("verdict") or {}
    first = next((m for m in map(FIX_FIRST.match, res.stdout.splitlines()) if m), None)
    rule, title = (first["rule"], first["title"].strip()) if first else (None, None)
    predicted = None
    for f in d.get("findings") or []:
        for fx in f.get("fixes") or []:
            if f.get("rule") == rule and title and fx.get("title", "").startswith(title[:40]):
                predicted = fx.get("predicted_speedup")
    return {
        "verdict": "failure" if v.get("failed") else (v.get("bottleneck") or "none"),
        "label": v.get("label"),
        "confidence": v.get("confidence_label"),
        "first_fix": f"[{rule}] {title}" if rule else "none",
        "predicted": predicted,
    }


def table(rows: list[dict], note: str) -> str:
    out = [
        "# Stability of the examples' cards",
        "",
        "Written by `benchmarks/example_stability.py` (do not edit by hand). " + note,
        "",
        "| example | condition | runs | verdicts | confidence of the minority | first fix (runs) | predicted |",
        "|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = collections.defaultdict(list)
    for r in rows:
        groups[(r["example"], r["condition"])].append(r)
    for (example, condition), rs in sorted(groups.items(), key=lambda kv: (EXAMPLES.index(kv[0][0]), kv[0][1])):
        ok = [r for r in rs if not r.get("error")]
        verdicts = collections.Counter(r["verdict"] for r in ok)
        major = verdicts.most_common(1)[0][0] if verdicts else None
        minority = collections.Counter(r["confidence"] for r in ok if r["verdict"] != major)
        # one family per fix whatever the number the run computed ("load batches in N worker processes"), with
        # the numbers seen
        fixes = collections.Counter(re.sub(r"\b\d+\b", "N", r["first_fix"]) for r in ok)
        numbers = collections.defaultdict(set)
        for r in ok:
            numbers[re.sub(r"\b\d+\b", "N", r["first_fix"])].update(
                int(n) for n in re.findall(r"\b\d+\b", r["first_fix"])
            )
        preds = sorted({r["predicted"] for r in ok if r["predicted"] is not None})
        errors = len(rs) - len(ok)
        out.append(
            f"| {example} | {condition} | {len(rs)}{f' ({errors} failed to record)' if errors else ''} | "
            + ", ".join(f"{v} {n}" for v, n in verdicts.most_common())
            + " | "
            + (", ".join(f"{c} {n}" for c, n in minority.most_common()) or "–")
            + " | "
            + "; ".join(
                f"{f} ({n}{'; N = ' + ', '.join(map(str, sorted(numbers[f]))) if numbers[f] else ''})"
                for f, n in fixes.most_common()
            )
            + " | "
            + (f"{preds[0]:.2f}x–{preds[-1]:.2f}x" if len(preds) > 1 else f"{preds[0]:.2f}x" if preds else "–")
            + " |"
        )
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="recordings per example and condition")
    ap.add_argument("--only", action="append", default=[], help="examples whose name contains this (repeatable)")
    ap.add_argument("--idle", action="store_const", dest="conditions", const=["idle"])
    ap.add_argument("--busy", action="store_const", dest="conditions", const=["busy"])
    ap.add_argument("--keep", type=Path, help="keep the recordings under this folder (to --reanalyze later)")
    ap.add_argument("--reanalyze", type=Path, help="analyze the recordings an earlier --keep kept; record nothing")
    ap.add_argument("--out", default=str(ROOT / "docs" / "STABILITY.md"), help="Markdown table ('-': stdout)")
    ap.add_argument("--json", type=Path, help="also write the per-run results here")
    ap.add_argument("--note", default="", help="a sentence on the conditions, printed under the header")
    args = ap.parse_args()
    examples = [e for e in EXAMPLES if not args.only or any(o in e for o in args.only)]
    rows = []
    if args.reanalyze:
        for folder in sorted(p for p in args.reanalyze.iterdir() if (p / "ranks").is_dir()):
            example, condition, run = folder.name.rsplit("-", 2)
            if example in examples:
                rows.append({"example": example, "condition": condition, "run": int(run), **read_card(folder)})
        note = f"Re-analysis of the recordings kept in `{args.reanalyze}`."
    else:
        keep = args.keep or Path(tempfile.mkdtemp(prefix="stability_"))
        keep.mkdir(parents=True, exist_ok=True)
        loads = []
        for run in range(args.runs):  # interleaved: every example once per round, so a load change hits all
            for condition in args.conditions or ["idle", "busy"]:
                for example in examples:
                    folder = keep / f"{example}-{condition}-{run}"
                    loads.append(os.getloadavg()[0])
                    t0 = time.monotonic()
                    error = record(example, folder, condition == "busy")
                    row = {"example": example, "condition": condition, "run": run}
                    row.update({"error": error} if error else read_card(folder))
                    row["seconds"] = round(time.monotonic() - t0, 1)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        note = (
            f"{args.runs} recordings per example and condition, kept in `{keep}`; load average (1 min) before "
            f"each recording: median {sorted(loads)[len(loads) // 2]:.1f}, max {max(loads):.1f} on {os.cpu_count()} "
            "cores; busy = beside one process spinning on a core."
        )
    text = table(rows, f"{note} {args.note}".strip())
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
