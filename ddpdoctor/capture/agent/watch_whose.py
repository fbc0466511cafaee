"""Part of the capture agent (standard library only): whose time a `run --watch` alarm is (issue 38).

At an alarm the rank compares its slow steps with the ones before them: part of the extra time is its own CPU
time (``OWN_CPU_SHARE``) or its loader's wait (``OWN_LOADER_SHARE``) -> its own new work or data; else at least
half run-queue wait (``CONTENTION_SHARE``) -> the host changed (other processes took the cores): noted, written to
``DIR/watch/contention.json`` for its peers, the baseline learned again, no incident; otherwise the rank only
waits longer (for a peer, I/O, its loader).
"""

from __future__ import annotations

import os
import time

from . import watch_incident as _files

CONTENTION_SHARE = 0.5  # a rise in step time at least half explained by run-queue wait: the host, not the job
OWN_CPU_SHARE = 0.15  # ... unless this share of the extra time is the rank's own CPU time: its own new work
OWN_LOADER_SHARE = 0.3  # ... or this share is its DataLoader's wait: its data got slower
CONTENTION_FILE = "contention.json"


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def whose_time(w, alarm) -> str:
    """``own``: the extra time per step is partly the rank's own CPU time (``OWN_CPU_SHARE``) or its loader's
    wait (``OWN_LOADER_SHARE``): new work or slower data here; ``host``: not that, and at least half of it is
    run-queue wait (other processes took the cores: noted, written for the peers, the baseline learned again,
    no incident); ``waits``: neither (the rank waits longer: for a peer, I/O).  Medians for a level alarm,
    means for a pauses alarm (a few long steps)."""
    n = w.detector.window_n
    before, slow = w.recent[:-n], w.recent[-n:]
    if not before or not slow:
        return "waits"
    stat = _mean if alarm.how == "pauses" else _median

    def extra(k: int) -> float:
        return stat([x[k] for x in slow]) - stat([x[k] for x in before])

    extra_wall = extra(0)
    if extra_wall <= 0:
        return "waits"
    if extra(2) >= OWN_CPU_SHARE * extra_wall or extra(3) >= OWN_LOADER_SHARE * extra_wall:
        return "own"
    extra_queue = extra(1)
    if extra_queue < CONTENTION_SHARE * extra_wall:
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
