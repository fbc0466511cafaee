"""Where one rank's time goes in `analyze`: scan, normalize, summarize (issue #17).

    python benchmarks/bench_rank_stages.py --set 2x450 --repeat 3 --write docs/SPEED.md

One process, the first rank file of the generated set (bench_analyze.generate, reused from
--work), each stage timed on its own, best of --repeat (fresh objects each round, garbage
collected between rounds). The pipeline is what `analyze` runs per rank: the C column reader
on the file mapped in memory (trace/fastscan.py), normalize on its columns (trace/normalize.py),
summarize. Beside it, for comparison: the 7-field msgspec decode of the file's bytes (what
bench_decode_limit.py calls the decode limit, per file) and the msgspec path `analyze` falls
back to when the reader bails (read, decode into ddpdoctor's structs, their columns (trace/msgscan.py), normalize).
`analyze -j CPUS` runs one such pipeline per rank in parallel, so with as many CPUs as files
this is the floor of its wall time, before process start-up and the cross-rank stage.

--write replaces the generated block of a Markdown file; figures in the docs come only from
such a run.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import generate
from bench_decode_limit import _commit, _load

BEGIN, END = "<!-- bench_rank_stages: begin -->", "<!-- bench_rank_stages: end -->"


class _Event7(msgspec.Struct, gc=False):
    name: str = ""
    cat: str = ""
    ph: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str = 0
    tid: int | str = 0


class _Trace7(msgspec.Struct, gc=False):
    traceEvents: list[_Event7] = []


PIPELINE = ("column scan, mapped file (C reader)", "normalize columns", "summarize (steps, breakdown, collectives)")


def _round(path: Path) -> dict[str, float]:
    from ddpdoctor.metrics.breakdown import summarize
    from ddpdoctor.trace import decode as D
    from ddpdoctor.trace import fastscan, msgscan
    from ddpdoctor.trace.normalize import normalize

    out = {}
    gc.collect()
    t = time.perf_counter()
    tried, fast = fastscan.scan_file(path)
    out[PIPELINE[0]] = time.perf_counter() - t
    assert tried and fast is not None, "the C reader did not run on this file"
    t = time.perf_counter()
    rt = normalize(str(path), *fast, 0, "file name")
    out[PIPELINE[1]] = time.perf_counter() - t
    del fast
    t = time.perf_counter()
    summarize(rt, 0)
    out[PIPELINE[2]] = time.perf_counter() - t
    del rt
    gc.collect()
    t = time.perf_counter()
    raw = D.read_bytes(path)
    out["read (msgspec path)"] = time.perf_counter() - t
    t = time.perf_counter()
    msgspec.json.Decoder(_Trace7).decode(raw)
    out["decode, 7-field struct (the limit)"] = time.perf_counter() - t
    gc.collect()
    t = time.perf_counter()
    trace = D.decode_trace(path, raw)
    out["decode, ddpdoctor's structs (msgspec path)"] = time.perf_counter() - t
    del raw
    t = time.perf_counter()
    cols = msgscan.columns(trace)
    out["structs to columns (msgspec path)"] = time.perf_counter() - t
    t = time.perf_counter()
    normalize(str(path), cols, trace, 0, "file name")
    out["normalize columns (msgspec path)"] = time.perf_counter() - t
    del cols
    del trace
    gc.collect()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", default="2x450", help="RANKSxMB (default 2x450)")
    ap.add_argument("--work", default="/tmp/ddpdoctor-bench")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write", action="append", default=[])
    args = ap.parse_args()
    commit = _commit()
    ranks, mb = args.set.split("x")
    traces = generate(Path(args.work), int(ranks), float(mb), False)
    path = sorted(traces.glob("*.json"))[0]
    rounds = [_round(path) for _ in range(args.repeat)]
    stages = list(rounds[0])
    best = {s: min(r[s] for r in rounds) for s in stages}
    pipeline = list(PIPELINE)
    total = sum(best[s] for s in pipeline)
    lines = ["| stage (one rank file) | best (s) | runs (s) | share of the pipeline |", "|---|---:|---|---:|"]
    for s in stages:
        share = f"{best[s] / total:.0%}" if s in pipeline else "–"
        lines.append(f"| {s} | {best[s]:.2f} | {', '.join(f'{r[s]:.2f}' for r in rounds)} | {share} |")
    lines.append(f"| **pipeline** (column scan + normalize columns + summarize) | **{total:.2f}** | | 100 % |")
    fallback = [s for s in stages if "msgspec path" in s] + [PIPELINE[2]]
    lines.append(
        f"| msgspec path for comparison (read + decode + columns + normalize + summarize) | "
        f"{sum(best[s] for s in fallback):.2f} | | – |"
    )
    size = path.stat().st_size / 1e6
    lines += ["", f"{path.name}: {size:.0f} MB."]
    table = "\n".join(lines)
    print(table)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    argv = " ".join(["python", "benchmarks/bench_rank_stages.py", *sys.argv[1:]])
    block = "\n".join(
        [
            BEGIN,
            f"Measured {stamp} at commit {commit} by `{argv}`;",
            f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"{_load()} at the end (shared machine).",
            "",
            table,
            END,
        ]
    )
    for target in args.write:
        p = Path(target)
        text = p.read_text()
        if BEGIN in text and END in text:
            text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
        else:
            text += ("\n" if text else "") + block + "\n"
        p.write_text(text)
        print(f"wrote {p}")


if __name__ == "__main__":
    main()
