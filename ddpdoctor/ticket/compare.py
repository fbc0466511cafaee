"""``ddpdoctor compare BEFORE AFTER``: did a change make the steps faster, and did the
verdict move?  Both sides are diagnosis dicts (report.json, a report folder, a bundle, or a
run analyzed on the fly).  Per category: mean over ranks of the per-step time (ms); the
step time is the median over every (rank, step). The categories are the reports' (the exposed
communication's transfer apart from the wait for a late peer)."""

from __future__ import annotations

import json
import statistics

from ..report import view
from ..report.escape import md

# the categories of the reports (report/view.py), in their order: exposed communication is split into its
# transfer and the wait for a late peer, so a waiting rank's time does not read as a slow network
ROWS = (
    "step_time",
    "compute",
    "comm_exposed",
    "comm_sync_wait",
    "memcpy",
    "dataloader_wait",
    "host_idle",
    "other",
    "comm",
    "gpu_busy",
)
NAMES = {**view.LABEL, "step_time": "step time (median)", "comm": "communication (total)", "gpu_busy": "GPU busy"}


def _step_median(d: dict) -> float | None:
    a = view.analysis(d)
    if not a:
        return None
    vals = [r["us"]["step_time"] for r in a.get("table") or [] if (r.get("us") or {}).get("step_time") is not None]
    if vals:
        return float(statistics.median(vals))
    means = [x for r in a["ranks"].values() if (x := (r.get("mean_us") or {}).get("step_time")) is not None]
    return float(statistics.median(means)) if means else None


def _mean(d: dict, col: str) -> float | None:
    a = view.analysis(d)
    if not a:
        return None
    vals = [x for r in a["ranks"].values() if (x := view.segment(r, col)) is not None]
    return sum(vals) / len(vals) if vals else None


def compare(before: dict, after: dict, max_regression: float | None = None) -> dict:
    rows = []
    for col in ROWS:
        b = _step_median(before) if col == "step_time" else _mean(before, col)
        a = _step_median(after) if col == "step_time" else _mean(after, col)
        if b is None and a is None:
            continue
        delta = None if a is None or b is None else a - b
        rows.append(
            {
                "column": col,
                "name": NAMES.get(col, col),
                "before_ms": None if b is None else b / 1000,
                "after_ms": None if a is None else a / 1000,
                "delta_ms": None if delta is None else delta / 1000,
                "delta_pct": None if delta is None or not b else 100 * delta / b,
            }
        )
    step = next((r for r in rows if r["column"] == "step_time"), None)
    change = step["delta_pct"] if step else None
    vb, va = before.get("verdict") or {}, after.get("verdict") or {}
    regressed = bool(max_regression is not None and change is not None and change > max_regression)
    return {
        "schema": "ddpdoctor.compare/1",
        "rows": rows,
        "step_time_change_pct": change,
        "speedup": (step["before_ms"] / step["after_ms"]) if step and step["after_ms"] and step["before_ms"] else None,
        "verdict_before": view.headline(before),
        "verdict_after": view.headline(after),
        "bottleneck_before": vb.get("bottleneck"),
        "bottleneck_after": va.get("bottleneck"),
        "verdict_moved": (vb.get("label") or vb.get("bottleneck")) != (va.get("label") or va.get("bottleneck"))
        or bool(vb.get("failed")) != bool(va.get("failed")),
        "failed_before": bool(vb.get("failed")),
        "failed_after": bool(va.get("failed")),
        "findings_before": [f.get("rule") for f in before.get("findings") or []],
        "findings_after": [f.get("rule") for f in after.get("findings") or []],
        "max_regression_pct": max_regression,
        "regressed": regressed,
    }


def _f(x, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def _lines(c: dict) -> tuple[list[str], list[list[str]], list[str]]:
    head = ["", "before ms", "after ms", "change ms", "change %"]
    body = [
        [
            r["name"],
            _f(r["before_ms"], ".2f"),
            _f(r["after_ms"], ".2f"),
            _f(r["delta_ms"], "+.2f"),
            _f(r["delta_pct"], "+.1f"),
        ]
        for r in c["rows"]
    ]
    notes = []
    ch = c["step_time_change_pct"]
    if ch is None:
        notes.append("Step time: not comparable (a side has no trace analysis).")
    elif ch < 0:
        notes.append(f"Steps are {-ch:.1f} % shorter: {c['speedup']:.2f}x faster.")
    elif ch > 0:
        notes.append(f"Steps are {ch:.1f} % longer: a regression ({c['speedup']:.2f}x).")
    else:
        notes.append("Step time unchanged.")
    notes.append(
        f"Verdict: {c['verdict_before']} → {c['verdict_after']}"
        + (" (moved)" if c["verdict_moved"] else " (unchanged)")
    )
    gone = [r for r in c["findings_before"] if r not in c["findings_after"]]
    new = [r for r in c["findings_after"] if r not in c["findings_before"]]
    if gone:
        notes.append("Findings resolved: " + ", ".join(map(str, gone)))
    if new:
        notes.append("New findings: " + ", ".join(map(str, new)))
    if c["max_regression_pct"] is not None:
        notes.append(("FAIL" if c["regressed"] else "OK") + f": step-time change limit +{c['max_regression_pct']:g} %")
    return head, body, notes


def render_text(c: dict) -> str:
    head, body, notes = _lines(c)
    widths = [max(len(str(r[i])) for r in [head, *body]) for i in range(len(head))]

    def fmt(r) -> str:
        return "  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(r, widths)))

    return "\n".join([fmt(head), "  ".join("-" * w for w in widths), *map(fmt, body), "", *notes]) + "\n"


def render_md(c: dict) -> str:
    head, body, notes = _lines(c)
    out = ["## ddpdoctor compare", "", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    out += ["| " + " | ".join(md(x) for x in r) + " |" for r in body]
    return "\n".join(out + [""] + [f"- {md(n)}" for n in notes]) + "\n"


def render(c: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(c, indent=1, default=str) + "\n"
    return render_md(c) if fmt in ("md", "markdown") else render_text(c)  # "terminal" (or "text"): the table
