"""Time `ddpdoctor analyze` against HTA's TraceAnalysis load on the same generated traces.

    python benchmarks/bench_analyze.py                 # 2 ranks x 400 MB and 16 ranks x 25 MB
    python benchmarks/bench_analyze.py --set 4x50      # any RANKSxMB set
    python benchmarks/bench_analyze.py --no-hta        # ddpdoctor only

Traces are generated once into --work (default /tmp/ddpdoctor-bench) and reused.  Each
measurement runs in a fresh process; peak memory is the largest resident set of that
process and its children (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

MEASURE = r"""
import resource, subprocess, sys, time, json
t = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
wall = time.perf_counter() - t
print(json.dumps({"rc": rc, "seconds": wall,
                  "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""

HTA_LOAD = "import sys; from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_dir=sys.argv[1])"


def measure(cmd: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def generate(work: Path, ranks: int, mb: float, gz: bool) -> Path:
    from ddpdoctor_synth import Scenario
    from ddpdoctor_synth import generate as gen

    folder = work / f"{ranks}x{mb:g}MB{'-gz' if gz else ''}"
    traces = folder / "traces"
    if not (folder / "done").exists():
        traces.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        truth = gen(
            Scenario(world_size=ranks, target_mb_per_rank=mb, straggler_rank=ranks - 1, straggler_extra_us=5000.0),
            traces,
            gzip=gz,
        )
        (traces / "truth.json").rename(folder / "truth.json")
        print(
            f"  generated {ranks} x {mb:g} MB in {time.perf_counter() - t:.1f}s "
            f"({sum(truth.bytes_per_rank.values()) / 1e6:.0f} MB of JSON)",
            flush=True,
        )
        (folder / "done").write_text("ok")
    return traces


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", action="append", help="RANKSxMB, e.g. 2x400 (repeatable)")
    ap.add_argument("--work", default="/tmp/ddpdoctor-bench")
    ap.add_argument("--gzip", action="store_true", help="write .json.gz traces")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    args = ap.parse_args()
    sets = args.set or ["2x400", "16x25"]
    print(f"machine: {os.cpu_count()} CPUs; ddpdoctor -j {args.jobs}")
    for spec in sets:
        ranks, mb = spec.lower().split("x")
        ranks, mb = int(ranks), float(mb)
        print(f"== {ranks} ranks x {mb:g} MB", flush=True)
        traces = generate(Path(args.work), ranks, mb, args.gzip)
        size = sum(p.stat().st_size for p in traces.iterdir()) / 1e6
        ours = measure(
            [
                sys.executable,
                "-m",
                "ddpdoctor",
                "analyze",
                str(traces),
                "--hta",
                "off",
                "-q",
                "-j",
                str(args.jobs),
                "--json",
                str(traces.parent / "analysis.json"),
            ]
        )
        assert ours["rc"] == 0, ours
        print(
            f"  ddpdoctor analyze: {ours['seconds']:.1f}s  ({size / ours['seconds']:.0f} MB/s of files)  "
            f"peak RSS {ours['peak_mb']:.0f} MB",
            flush=True,
        )
        if args.no_hta:
            continue
        hta = measure([sys.executable, "-c", HTA_LOAD, str(traces)])
        if hta["rc"] != 0:
            print(f"  HTA TraceAnalysis load: failed (exit {hta['rc']})")
            continue
        print(
            f"  HTA TraceAnalysis load: {hta['seconds']:.1f}s  peak RSS {hta['peak_mb']:.0f} MB  "
            f"-> ddpdoctor is {hta['seconds'] / ours['seconds']:.1f}x faster",
            flush=True,
        )


if __name__ == "__main__":
    main()
