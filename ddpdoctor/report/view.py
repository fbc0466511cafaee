"""What every report format derives from the diagnosis dict (``ddpdoctor.diagnosis/1``):
the headline, the categories of the step-time partition, which ranks to show with many
ranks, number formatting.  Pure Python (no matplotlib, no traces)."""

from __future__ import annotations

import json

import statistics

MAX_RANKS_SHOWN = 16

# the exclusive categories of a step, in drawing order, with labels and colours
CATEGORIES = (
    ("compute", "compute", "#4c9a2a"),
    ("comm_exposed", "exposed comm", "#b5179e"),
    ("memcpy", "memcpy", "#7209b7"),
    ("dataloader_wait", "DataLoader wait", "#f4a261"),
    ("host_idle", "GPU idle, host busy", "#e76f51"),
    ("other", "other / idle", "#adb5bd"),
)
LABEL = {c: lab for c, lab, _ in CATEGORIES}
COLOR = {c: col for c, _, col in CATEGORIES}


def ms(us) -> str:
    return "–" if us is None else f"{us / 1000:.2f}"


def pct(share) -> str:
    return "–" if share is None else f"{100 * share:.1f} %"


def headline(d: dict) -> str:
    """The verdict in one line; a failure comes before any performance verdict."""
    v = d.get("verdict") or {}
    perf = ""
    if v.get("bottleneck"):
        perf = v.get("label") or f"{v['bottleneck']}-bound"
        if v.get("confidence") is not None:
            perf += f" (confidence {v.get('confidence_label')}, {v['confidence']:.2f})"
    if v.get("failed"):
        first = next((f for f in d.get("findings") or [] if f.get("category") in ("failure", "network", "memory")), None)
        head = "the run failed" + (f": {first['title']}" if first and first.get("title") else "")
        return head + (f" (recorded steps: {perf})" if perf else "")
    return perf or "no performance verdict"


def verdict_summary(d: dict) -> str:
    v = d.get("verdict") or {}
    s = v.get("summary") or ""
    label = v.get("label")
    if label and s.startswith(label + ": "):
        s = s[len(label) + 2:]
    return s


def analysis(d: dict) -> dict | None:
    a = d.get("analysis")
    return a if isinstance(a, dict) and a.get("ranks") else None


def partition(d: dict) -> list[str]:
    a = analysis(d) or {}
    kinds = {r.get("device_kind") for r in (a.get("ranks") or {}).values()}
    part = (a.get("partition") or {}).get("gpu" if "gpu" in kinds else "cpu") or [c for c, _, _ in CATEGORIES]
    return [c for c, _, _ in CATEGORIES if c in part]


def rank_ids(d: dict) -> list[str]:
    a = analysis(d) or {}
    return sorted((a.get("ranks") or {}), key=lambda r: int(r) if str(r).lstrip("-").isdigit() else 0)


def step_ms(d: dict, r: str) -> float | None:
    v = ((analysis(d) or {}).get("ranks", {}).get(r, {}).get("mean_us") or {}).get("step_time")
    return None if v is None else v


def stragglers(d: dict) -> list[dict]:
    return list(((analysis(d) or {}).get("cross_rank") or {}).get("stragglers") or [])


def select_ranks(d: dict, limit: int = MAX_RANKS_SHOWN) -> tuple[list[str], str | None]:
    """All ranks when few; else fastest, median, slowest (two each) and stragglers."""
    ids = rank_ids(d)
    if len(ids) <= limit:
        return ids, None
    by = sorted(ids, key=lambda r: (step_ms(d, r) or 0.0, int(r)))
    keep = {by[0], by[1], by[len(by) // 2], by[len(by) // 2 - 1], by[-2], by[-1]}
    keep |= {str(s["rank"]) for s in stragglers(d)[:limit - len(keep)]}
    chosen = [r for r in ids if r in keep]
    return chosen, (f"showing {len(chosen)} of {len(ids)} ranks: the fastest, median and slowest by step time, "
                    "and the stragglers")


def spread(d: dict, col: str) -> dict | None:
    """Min / p10 / median / p90 / max over ranks of a column's mean (µs)."""
    a = analysis(d) or {}
    vals = sorted(v for r in (a.get("ranks") or {}).values() if (v := (r.get("mean_us") or {}).get(col)) is not None)
    if not vals:
        return None

    def q(p: float) -> float:
        return vals[min(len(vals) - 1, max(0, round(p * (len(vals) - 1))))]

    return {"min": vals[0], "p10": q(0.1), "median": statistics.median(vals), "p90": q(0.9), "max": vals[-1]}


def fix_is_diff(change: str) -> bool:
    """A fix reads as a diff when it adds lines (``+ …``); ``- `` bullets alone are prose."""
    return any(x.startswith("+") for x in change.splitlines())


def fix_lang(fx: dict) -> str:
    """The code-block language of a fix: diff, python, bash or plain."""
    change = fx.get("change") or ""
    if fix_is_diff(change):
        return "diff"
    return {"env": "bash", "command": "bash"}.get(fx.get("kind") or "", "")


def findings(d: dict) -> list[dict]:
    return list(d.get("findings") or [])


def log_events(d: dict) -> list[dict]:
    return list((d.get("logs") or {}).get("events") or [])


def evidence_value(v, limit: int = 300) -> str:
    """An evidence value as short plain text (escape it for the output format afterwards)."""
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    if isinstance(v, (dict, list)):
        s = json.dumps(v, default=str)
        return s if len(s) <= limit else s[:limit] + " …"
    return "" if v is None else str(v)
