"""Part of the capture agent: torch.compile (Dynamo) compilations
during the step window, per step.

Dynamo keeps a record of every frame compilation it ran (``torch._dynamo.utils.
get_compilation_metrics()``: start and end time, compile id ``frame/attempt``, the guard that
failed for a recompilation) and of every lazy backward compilation.  At the window's start
and at each step boundary this part notes the time; at the window's end it reads the records
that began inside the window and assigns each to its step.  Nothing is hooked into Dynamo, so
a compiled step runs exactly as without ddpdoctor.

It reads ``torch._dynamo.utils`` only when the script's own torch.compile has already
imported it (``sys.modules``): with no torch.compile it costs one dict lookup per boundary
and records ``{"used": false}``; it never imports Dynamo itself.
"""

from __future__ import annotations

import sys
import time

MAX_REASONS = 5
MAX_REASON_CHARS = 300


def _dynamo_utils():
    return sys.modules.get("torch._dynamo.utils")


def _limit():
    """Dynamo's recompilation limit per frame (``recompile_limit``, ``cache_size_limit`` before 2.6)."""
    config = sys.modules.get("torch._dynamo.config")
    for name in ("recompile_limit", "cache_size_limit"):
        v = getattr(config, name, None) if config is not None else None
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def compile_events(metrics, t0_us: int, t1_us: int) -> list[dict]:
    """The compilations that started in [t0_us, t1_us): ``{"start_us", "end_us", "kind"
    ("frame" | "backward"), "compile_id", "reason"}``; ``metrics`` are Dynamo's
    CompilationMetrics records (any object with those attributes)."""
    out = []
    for m in metrics:
        start, end = getattr(m, "start_time_us", None), getattr(m, "end_time_us", None)
        if not isinstance(start, int) or not isinstance(end, int) or not t0_us <= start < t1_us:
            continue
        frame = getattr(m, "entire_frame_compile_time_s", None) is not None or getattr(m, "frame_key", None) is not None
        reason = getattr(m, "recompile_reason", None)
        out.append(
            {
                "start_us": start,
                "end_us": max(start, end),
                "kind": "frame" if frame else "backward",
                "compile_id": str(getattr(m, "compile_id", "") or ""),
                "reason": str(reason)[:MAX_REASON_CHARS] if reason else None,
            }
        )
    return out


def guard_text(reason: str) -> str:
    """The failed guard of a recompile reason, without its compile id, the source line Dynamo quotes
    after " # " (with the file's absolute path) and the user stack trace: ``0/3: tensor 'x' size
    mismatch at index 1. expected 40, actual 57`` -> ``tensor 'x' size mismatch at index 1. ...``."""
    text = reason.strip().splitlines()[0] if reason.strip() else ""
    head, sep, rest = text.partition(": ")
    if sep and head.replace("/", "").replace("_", "").isalnum() and "/" in head:
        text = rest
    return text.split(" # ", 1)[0].split(" User stack trace:", 1)[0].strip()[:MAX_REASON_CHARS]


def per_step(events: list[dict], bounds_us: list[int]) -> list[dict]:
    """Compilations per recorded step: ``bounds_us`` are the window's start and each step's end
    (n + 1 times for n steps).  Pure: unit-tested on built inputs."""
    steps = [{"compiles": 0, "compile_ms": 0.0} for _ in range(max(0, len(bounds_us) - 1))]
    for e in events:
        for i in range(len(steps)):
            if bounds_us[i] <= e["start_us"] < bounds_us[i + 1]:
                steps[i]["compile_ms"] += (min(e["end_us"], bounds_us[i + 1]) - e["start_us"]) / 1000.0
                if e["kind"] == "frame":
                    steps[i]["compiles"] += 1
                break
    for s in steps:
        s["compile_ms"] = round(s["compile_ms"], 3)
    return steps


def summarize(events: list[dict], bounds_us: list[int], limit) -> dict:
    steps = per_step(events, bounds_us)
    wall_ms = (bounds_us[-1] - bounds_us[0]) / 1000.0 if len(bounds_us) > 1 else 0.0
    compile_ms = sum(s["compile_ms"] for s in steps)
    reasons: dict[str, dict] = {}
    for e in sorted(events, key=lambda e: e["start_us"]):
        if e["reason"]:
            text = guard_text(e["reason"])
            # one guard failing with new values each time ("expected 40, actual 57") is one reason
            guard = text.split(". expected ", 1)[0]
            r = reasons.setdefault(guard, {"guard": guard, "count": 0})
            r["count"] += 1
            r["example"] = text  # the latest
    return {
        "used": True,
        "steps": steps,
        "compiles": sum(s["compiles"] for s in steps),
        "recompiles": sum(1 for e in events if e["kind"] == "frame" and e["reason"]),
        "compile_ms": round(compile_ms, 3),
        "window_ms": round(wall_ms, 3),
        "reasons": sorted(reasons.values(), key=lambda r: (-r["count"], r["guard"]))[:MAX_REASONS],
        "recompile_limit": limit,
    }


class CompileWatch:
    """The agent calls ``window_start`` / ``step`` / ``window_stop`` at the window's boundaries
    (training thread); ``record()`` is what settings.json holds under ``compile``."""

    def __init__(self):
        self._bounds: list[int] = []
        self._record: dict | None = None

    def window_start(self) -> None:
        self._bounds = [time.time_ns() // 1000]
        self._record = None

    def step(self) -> None:
        if self._bounds:
            self._bounds.append(time.time_ns() // 1000)

    def window_stop(self) -> None:
        if not self._bounds:
            return
        bounds, self._bounds = self._bounds + [time.time_ns() // 1000], []
        utils = _dynamo_utils()
        get = getattr(utils, "get_compilation_metrics", None) if utils is not None else None
        if get is None:
            self._record = {"used": False}
            return
        metrics = list(get())
        if not metrics:  # Dynamo imported (by a library) but nothing compiled
            self._record = {"used": False, "dynamo_loaded": True}
            return
        self._record = summarize(compile_events(metrics, bounds[0], bounds[-1]), bounds, _limit())

    def record(self) -> dict | None:
        return self._record
