"""`ddpdoctor analyze` against the decode limit and HTA's load, in one run (issue #17).

    python benchmarks/bench_decode_limit.py --set 2x450 --write docs/SPEED.md
    python benchmarks/bench_decode_limit.py --set 2x450 --before /tmp/old-tree --no-hta

Measured on the same generated traces (bench_analyze.generate, reused from --work):

* decode limit: one process decodes every event of every file with msgspec into a
  7-field struct (name, cat, ph, ts, dur, pid, tid) and nothing else: the time any
  analysis of these files in one process must spend before it looks at an event;
* ``ddpdoctor analyze`` (``--hta off -q -j CPUS``), wall time and peak RSS of the
  process tree, best of --repeat fresh processes; with --before DIR, the same command
  with DIR (a checkout of an older commit) first on PYTHONPATH, interleaved with the
  current tree so both see the same machine load;
* HTA's ``TraceAnalysis`` load, once (it takes minutes).

--write replaces the generated block of a Markdown file with the table (date, commit,
command, machine); figures in the docs come only from such a run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import HTA_LOAD, MEASURE, generate

DECODE_LIMIT = r"""
import sys, msgspec
class Ev(msgspec.Struct, gc=False):
    name: str = ""
    cat: str = ""
    ph: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str = 0
    tid: int | str = 0
class Tr(msgspec.Struct, gc=False):
    traceEvents: list[Ev] = []
dec = msgspec.json.Decoder(Tr)
n = 0
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        n += len(dec.decode(f.read()).traceEvents)
print(n, file=sys.stderr)
"""

BEGIN, END = "<!-- bench_decode_limit: begin -->", "<!-- bench_decode_limit: end -->"


def _run(cmd: list[str], pythonpath: str, cwd: str) -> dict:
    """bench_analyze's MEASURE in a fresh process with PYTHONPATH set, started in ``cwd`` (not
    a source tree: ``python -m`` puts the working directory first on sys.path, which would
    shadow PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True, check=True, env=env, cwd=cwd
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _module_file(pythonpath: str, cwd: str) -> str:
    """Which ddpdoctor the measured command imports with this PYTHONPATH (a check, printed)."""
    out = subprocess.run(
        [sys.executable, "-c", "import ddpdoctor.trace.decode as d; print(d.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": pythonpath},
        cwd=cwd,
    )
    return out.stdout.strip()


def _best(runs: list[dict]) -> dict:
    assert all(r["rc"] == 0 for r in runs), runs
    best = min(runs, key=lambda r: r["seconds"])
    return {
        "seconds": best["seconds"],
        "peak_mb": max(r["peak_mb"] for r in runs),
        "all": [round(r["seconds"], 2) for r in runs],
    }


def _load() -> str:
    try:
        return "load average %.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        return "load average unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="2x450", help="RANKSxMB (default 2x450)")
    ap.add_argument("--work", default="/tmp/ddpdoctor-bench")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", help="a checkout of an older commit to time the same way (PYTHONPATH)")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument(
        "--write", action="append", default=[], help="Markdown file whose generated block gets the table (repeatable)"
    )
    args = ap.parse_args()
    ranks, mb = args.set.lower().split("x")
    traces = generate(Path(args.work), int(ranks), float(mb), False)
    files = sorted(str(p) for p in traces.iterdir() if p.name.endswith(".json"))
    size = sum(os.path.getsize(p) for p in files) / 1e6
    here = str(Path(__file__).resolve().parents[1])
    jobs = str(os.cpu_count())
    cmd = [
        sys.executable,
        "-m",
        "ddpdoctor",
        "analyze",
        str(traces),
        "--hta",
        "off",
        "-q",
        "-j",
        jobs,
        "--json",
        str(traces.parent / "analysis.json"),
    ]
    print(f"{len(files)} files, {size:.0f} MB; {os.cpu_count()} CPUs; {_load()}", flush=True)

    for tree in [here] + ([args.before] if args.before else []):
        print(f"  {tree}: runs {_module_file(str(Path(tree).resolve()), args.work)}", flush=True)
    limit, after, before = [], [], []
    for i in range(args.repeat):  # interleaved, so every variant sees the same load
        limit.append(_run([sys.executable, "-c", DECODE_LIMIT, *files], here, args.work))
        after.append(_run(cmd, here, args.work))
        if args.before:
            before.append(_run(cmd, str(Path(args.before).resolve()), args.work))
        print(
            f"  round {i + 1}: decode limit {limit[-1]['seconds']:.2f}s, analyze {after[-1]['seconds']:.2f}s"
            + (f", before {before[-1]['seconds']:.2f}s" if before else "")
            + f"; {_load()}",
            flush=True,
        )
    rows = {"decode limit (1 process, 7-field struct)": _best(limit), "ddpdoctor analyze": _best(after)}
    if before:
        rows[f"ddpdoctor analyze before ({_commit(args.before)})"] = _best(before)
    if not args.no_hta:
        hta = _run([sys.executable, "-c", HTA_LOAD, str(traces)], here, args.work)
        if hta["rc"] == 0:
            rows["HTA TraceAnalysis load (once)"] = {**hta, "all": [round(hta["seconds"], 2)]}
        else:
            print(f"  HTA load failed (exit {hta['rc']})")
    table = _table(rows, size)
    print(table)
    commit = _commit()  # before any --write file changes the tree
    for path in args.write:
        _write(Path(path), table, args, len(files), size, commit)


def _commit(tree: str | None = None) -> str:
    if tree and not (Path(tree) / ".git").exists():
        return Path(tree).name
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=tree or Path(__file__).resolve().parents[1],
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        cwd=tree or Path(__file__).resolve().parents[1],
    ).stdout.strip()
    return out.stdout.strip() + ("+dirty" if dirty else "")


def _table(rows: dict, size: float) -> str:
    limit = rows["decode limit (1 process, 7-field struct)"]["seconds"]
    ours = rows["ddpdoctor analyze"]["seconds"]
    lines = [
        "| measurement | wall (s), best | runs (s) | peak RSS (MB) | × decode limit | HTA load ÷ this |",
        "|---|---:|---|---:|---:|---:|",
    ]
    hta = rows.get("HTA TraceAnalysis load (once)", {}).get("seconds")
    for name, r in rows.items():
        ratio_hta = f"{hta / r['seconds']:.1f}" if hta else "n/a"
        lines.append(
            f"| {name} | {r['seconds']:.2f} | {', '.join(map(str, r['all']))} | {r['peak_mb']:.0f} | "
            f"{r['seconds'] / limit:.2f} | {ratio_hta} |"
        )
    lines.append("")
    lines.append(f"{size:.0f} MB of JSON; analyze reads {size / ours:.0f} MB/s of files.")
    return "\n".join(lines)


def _write(path: Path, table: str, args, n_files: int, size: float, commit: str) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    argv = " ".join(["python", "benchmarks/bench_decode_limit.py", *sys.argv[1:]])
    block = "\n".join(
        [
            BEGIN,
            f"Measured {stamp} at commit {commit} by `{argv}`;",
            f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"{_load()} at the end (shared machine); {n_files} generated files ({args.set}, {size:.0f} MB).",
            "",
            table,
            END,
        ]
    )
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
    else:
        text = text + ("\n" if text else "") + block + "\n"
    path.write_text(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"benchmark took {time.perf_counter() - t0:.0f}s")
