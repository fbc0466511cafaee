"""Part of the capture agent (standard library only): whose time a `run --watch` alarm is (issue 38).

At an alarm the rank compares its slow steps with the ones before them: its own CPU time per step rose
(``OWN_CPU_RISE``) -> its own new work; the extra time at least half run-queue wait (``CONTENTION_SHARE``)
with no such rise -> the host changed (other processes took the cores): noted, written to
``DIR/watch/contention.json`` for its peers, the baseline learned again, no incident; otherwise the rank only
waits longer (for a peer, I/O, its loader).
"""

from __future__ import annotations

import os
import time

from . import watch_incident as _files

CONTENTION_SHARE = 0.5  # a rise in step time at least half explained by run-queue wait: the host, not the job
OWN_CPU_RISE = 1.5  # ... unless the rank's own CPU time per step rose this much: its own new work
CONTENTION_FILE = "contention.json"


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def whose_time(w, alarm) -> str:
    """``own``: the rank's own CPU time per step rose (new work here); "host": the extra time is mostly
    run-queue wait with no more CPU (other processes took the cores: noted, the baseline learned again, no
    incident); "waits": neither (the rank waits longer: for a peer, I/O, its loader)."""
    n = w.detector.window_n
    before, slow = w.recent[:-n], w.recent[-n:]
    if not before or not slow:
        return "waits"
    extra_wall = alarm.median_s - alarm.baseline.median_s
    cpu0, cpu1 = _median([c for *_x, c in before]), _median([c for *_x, c in slow])
    if cpu0 > 0 and cpu1 >= OWN_CPU_RISE * cpu0:
        return "own"
    extra_queue = _median([q for _w, q, _c in slow]) - _median([q for _w, q, _c in before])
    if extra_wall <= 0 or extra_queue < CONTENTION_SHARE * extra_wall:
        return "waits"
    note_contention(w, alarm, extra_queue, "this rank's run-queue wait")
    try:
        _files.write_json(
            os.path.join(w.bundle, "watch", CONTENTION_FILE),
            {"rank": w.agent.rank, "step": alarm.step, "time": time.time()},
        )
    except OSError as exc:
        w.agent.internal_error("watch contention", exc)
    return "host"


def peer_contention(w, since: float) -> bool:
    try:
        return os.stat(os.path.join(w.bundle, "watch", CONTENTION_FILE)).st_mtime >= since - _window_s(w)
    except OSError:
        return False


def _window_s(w) -> float:
    b = w.detector.baseline
    return (b.median_s if b else 0.0) * w.detector.window_n + 1.0


def note_contention(w, alarm, extra_queue: float | None, by: str) -> None:
    episode = {
        "step": alarm.step,
        "ratio": round(alarm.ratio, 3),
        "extra_ms": round((alarm.median_s - alarm.baseline.median_s) * 1000, 2),
        "run_queue_extra_ms": round(extra_queue * 1000, 2) if extra_queue is not None else None,
        "explained_by": by,
    }
    w.contention.append(episode)
    del w.contention[:-20]
    w.agent.event("watch_contention", **episode)
    w.detector.relearn()
