"""Clock skew between two nodes: is the real straggler still named, and is the offset recovered?

    python benchmarks/clock_skew.py                  # writes the Markdown table to stdout
    python benchmarks/clock_skew.py --out table.md

Each case is a synthetic 8-rank job, 4 ranks per node (hosts node0, node1), 6 profiled steps of
≈110 ms with 4 all-reduces each, every rank's recorded all-reduce ends jittered by σ = 20 µs.
Node 1's clock reads ``skew`` ms ahead.  With a straggler, rank 1 (node 0) computes 10 ms longer
each step.  Each case runs ``ddpdoctor analyze --json`` twice in a fresh process: as shipped,
and with the correction switched off (``--set metrics.clock.min_offset_us=1e12``).

``--layout handler``: the same traces as plain ``tensorboard_trace_handler`` output (no ``host_name``
in them; files ``{host}_{pid}.{time_ns}.pt.trace.json.gz`` in one folder per node, given as two PATHs);
``--layout folders``: no host in the names either (``{pid}.{time_ns}…``), the node folders only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SKEWS_MS = (-50.0, -20.0, -5.0, -1.0, -0.2, 0.0, 0.05, 0.2, 1.0, 5.0, 20.0, 50.0)
OFF = ("--set", "metrics.clock.min_offset_us=1e12")


def analyze(folders: list[Path], *extra: str) -> dict:
    out = folders[0].parent / f"report{len(extra)}.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "analyze",
            *map(str, folders),
            "--no-config",
            "-j",
            "1",
            "--json",
            str(out),
            *extra,
        ],
        check=True,
        capture_output=True,
    )
    return json.loads(out.read_text())["analysis"]["cross_rank"]


def named(cr: dict) -> str:
    ranks = [s["rank"] for s in cr["stragglers"]]
    return ", ".join(map(str, sorted(ranks))) if ranks else "none"


def case(work: Path, skew: float, straggler: int | None, layout: str = "trace") -> dict:
    from ddpdoctor_synth import Scenario, generate
    from ddpdoctor_synth.handler import HOSTS, handler_layout

    folder = work / f"skew{skew:+g}_{'strag' if straggler is not None else 'none'}"
    sc = Scenario(
        world_size=8,
        steps=6,
        ranks_per_node=4,
        node_skew_ms=[0.0, skew],
        straggler_rank=straggler,
        straggler_extra_us=10_000.0 if straggler is not None else 0.0,
        kernel_us=500.0,
        end_jitter_us=20.0,
        name="clock_skew",
    )
    generate(sc, folder / "gen")
    folders = [folder / "gen"]
    if layout != "trace":
        folders = handler_layout(folder / "gen", folder, sc, naming="handler" if layout == "handler" else "plain")
    on, off = analyze(folders), analyze(folders, *OFF)
    node1 = {"trace": "node1", "handler": HOSTS[1], "folders": "node1"}[layout]
    unit = (on.get("clock") or {}).get("units", {}).get(node1) or {}
    return {
        "skew_ms": skew,
        "straggler": straggler,
        "with": named(on),
        "without": named(off),
        "estimated_ms": unit.get("offset_us", 0.0) / 1000.0,
        "spread_us": unit.get("spread_us"),
        "applied": bool(unit.get("applied")),
    }


def table(rows: list[dict]) -> str:
    out = [
        "| injected skew node1 (ms) | true straggler | named, with correction | named, without correction "
        "| estimated offset node1 (ms) | spread (µs) | applied |",
        "|---:|---|---|---|---:|---:|---|",
    ]
    for r in rows:
        truth = "none" if r["straggler"] is None else str(r["straggler"])
        spread = "–" if r["spread_us"] is None else f"{r['spread_us']:.1f}"
        out.append(
            f"| {r['skew_ms']:+g} | {truth} | {r['with']} | {r['without']} | {r['estimated_ms']:+.3f} "
            f"| {spread} | {'yes' if r['applied'] else 'no'} |"
        )
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--work", type=Path)
    ap.add_argument(
        "--layout",
        choices=("trace", "handler", "folders"),
        default="trace",
        help="where the host names come from: the traces' host_name, the trace handler's file names, "
        "or only the node folders",
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or Path(tmp)
        rows = [case(work, s, 1, a.layout) for s in SKEWS_MS] + [
            case(work, s, None, a.layout) for s in (-50.0, -5.0, 0.0, 5.0, 50.0)
        ]
    text = table(rows)
    if a.out:
        a.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
