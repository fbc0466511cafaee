"""Part of the capture agent: the time the Python stack sampler cannot see.

The stack sampler (``stacks.py``) is a Python thread: while C code holds the GIL (a garbage
collection, a large ``json.dumps`` / ``pickle.dumps``, a C extension that does not release it) it cannot
run, so that time shows as a gap between its samples, never as a frame.  Over the profiled window only:

- ``GcRecorder``: every garbage collection (``gc.callbacks``): generation, duration, objects collected,
  the step it fell in;
- ``NativeDumps`` (opt-in: DDPDOCTOR_NATIVE_SAMPLER=1): a sampler that does not need the GIL.
  ``faulthandler.dump_traceback_later(timeout)``, re-armed by the stack sampler at each of its samples,
  makes CPython's C watchdog thread write every thread's stack once the sampler has starved for
  ``timeout``, GIL or not.  The stack sampler notes the file's length at each of its samples, so the
  dumps written inside one of its gaps are known and name the frame that held the GIL.  A forked child
  would inherit a watchdog that no longer exists and hang in its exit (CPython waits for that thread):
  the alarm is cancelled before every ``os.fork`` (``os.register_at_fork``; the next sample re-arms it);
- ``Gaps``: the sampler's starvation (a gap far above its interval).  A gap has two causes a Python
  thread cannot tell apart by its clock: another thread held the GIL, or the sampler thread was runnable
  without a CPU (an oversubscribed host).  ``ThreadRunQueue`` reads the sampler thread's own run-queue
  wait (``/proc/thread-self/schedstat``) at each sample: the part of a gap's excess that wait covers is
  CPU starvation, and the time the sampler thread itself ran (its /proc reads between samples: measured
  40 ms once on a loaded host, ``own_ms``) is no starvation at all; only the rest is attributed, to GC when collections cover most of it, else to the
  call the native dumps name, or the call the gap ended on: the sampler's first sample after it found the
  training thread's innermost frame on a call instruction, where CPython checks for a waiting thread right
  after a call returns (``gil_places.py``, ``returned_call.py``).  Such a gap counts from a lower bar
  (``CALL_GAP_SWITCHES`` switch intervals past the sampling interval): a thread running Python hands the GIL
  over one switch interval after the request.  The window thread takes its sample before anything else
  after its wake-up (a file read releases the GIL and lets the training thread run on past the call).

Standard library only; nothing here raises into the user's program (``evidence.py`` guards it).
"""

from __future__ import annotations

import faulthandler
import gc
import os
import sys
import time

from .gil_places import RETURNED, call_place, dump_place, parse_dumps, where_text
from .returned_call import at_call
from .runqueue import SCHEDSTAT, ThreadRunQueue

__all__ = ["GcRecorder", "Gaps", "NativeDumps", "dump_place", "parse_dumps", "split_gap", "summarize", "where_text"]

KEEP_COLLECTIONS = 2000  # collections listed one by one (the totals count every one)
GAP_FACTOR = 4.0  # a gap between samples of this many intervals ...
GAP_MIN_S = 0.015  # ... and at least this long is starvation (5 ms is CPython's GIL switch interval)
# A gap that ended on a call's return (gil_places.call_place) is starvation from this many switch intervals
# past the sampler's own interval: a thread running Python hands the GIL over one switch interval after the
# request, so a longer wait ending as a call returned is that call holding it (never above the bar above).
CALL_GAP_SWITCHES = 2
GC_COVERS = 0.5  # collections covering this share of a gap's excess make it a GC gap
NATIVE_MIN_INTERVAL_S = 0.01  # the C watchdog's alarm is never set shorter than this
KEEP_CALLS = 10  # GIL-holding calls kept per rank, the longest first
CPU_ONLY_SLICES = 2  # timeslices of a gap starved of CPU alone (split_gap)


# ------------------------------------------------------------------ garbage collections


class GcRecorder:
    """Every collection while installed: ``gc.callbacks`` calls ``start`` and ``stop`` around it, in the
    thread that triggered it (any thread: every Python thread is paused while it runs)."""

    def __init__(self, step_of):
        self.step_of = step_of
        self.t0 = 0.0
        self.collections: list[list] = []  # [generation, start ms from window start, ms, collected, step]
        self.spans: list[tuple[float, float]] = []
        self.dropped = 0
        self.by_gen: dict[int, list] = {}  # generation -> [count, seconds, max seconds, collected]
        self.per_step: dict[int, float] = {}  # step -> seconds
        self._began = None

    def start(self) -> None:
        self.t0 = time.perf_counter()
        gc.callbacks.append(self._callback)

    def stop(self) -> None:
        try:
            gc.callbacks.remove(self._callback)
        except ValueError:
            pass

    def _callback(self, phase, info) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._began = now
            return
        began, self._began = self._began, None
        if began is None:
            return
        dur = now - began
        gen = int(info.get("generation", -1))
        collected = int(info.get("collected", 0))
        step = self.step_of()
        g = self.by_gen.setdefault(gen, [0, 0.0, 0.0, 0])
        g[0] += 1
        g[1] += dur
        g[2] = max(g[2], dur)
        g[3] += collected
        self.per_step[step] = self.per_step.get(step, 0.0) + dur
        self.spans.append((began, now))
        if len(self.collections) < KEEP_COLLECTIONS:
            self.collections.append([gen, round((began - self.t0) * 1000, 3), round(dur * 1000, 3), collected, step])
        else:
            self.dropped += 1

    def covered_s(self, t0: float, t1: float) -> float:
        """Seconds of [t0, t1] (perf_counter) spent in collections."""
        return sum(max(0.0, min(e, t1) - max(s, t0)) for s, e in self.spans if e > t0 and s < t1)

    def record(self, steps: int) -> dict:
        total = sum(g[1] for g in self.by_gen.values())
        return {
            "collections": self.collections,
            "dropped": self.dropped,
            "by_generation": {
                str(k): {"count": v[0], "ms": round(v[1] * 1000, 3), "max_ms": round(v[2] * 1000, 3), "collected": v[3]}
                for k, v in sorted(self.by_gen.items())
            },
            "per_step_ms": {str(k): round(v * 1000, 3) for k, v in sorted(self.per_step.items())},
            "total_ms": round(total * 1000, 3),
            "ms_per_step": round(total * 1000 / steps, 3) if steps > 0 else None,
        }


# ------------------------------------------------------------------ the C watchdog's stack dumps

_FORK_HOOKED = []  # the NativeDumps whose watchdog a fork must not inherit (os.register_at_fork once)


def _before_fork() -> None:
    for n in _FORK_HOOKED:
        if n.active:
            faulthandler.cancel_dump_traceback_later()
            n.pauses += 1


class NativeDumps:
    """faulthandler's C watchdog as a one-shot alarm the stack sampler re-arms at each of its samples
    (``arm()``): it fires only when the sampler has not run for ``timeout`` seconds -- C code holds the
    GIL -- and then writes every thread's stack to ``path`` once.  ``offset()`` is the file's length.

    Opt-in (DDPDOCTOR_NATIVE_SAMPLER=1): the watchdog reads the frames of threads that may be running.
    Dumping on a timer (``repeat=True``, every 10 ms) crashed a CPython 3.11 process within seconds
    (SIGSEGV in PyCode_Addr2Line on a frame being changed; benchmarks/sampler_overhead.py --gil);
    one dump per starvation, while the training thread sits in a C call, is far rarer
    but not free of that race."""

    def __init__(self, path: str, timeout: float):
        self.path = path
        self.timeout = max(NATIVE_MIN_INTERVAL_S, timeout)
        self.fh = None
        self.active = False
        self.error = None
        self.pauses = 0
        self.arms = 0
        self._armed = 0.0

    def start(self) -> bool:
        try:
            self.fh = open(self.path, "w+", encoding="utf-8")
            if not _FORK_HOOKED:
                os.register_at_fork(before=_before_fork)
            _FORK_HOOKED[:] = [self]
            self.active = True
            self.arm()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            self.active = False
        return self.active

    def arm(self, now: float | None = None) -> None:
        """Re-arm the alarm (``timeout`` from now); at most three times per ``timeout`` (one re-arm costs
        ~40 µs holding the GIL: it restarts the watchdog thread), so it fires after 2/3 to all of
        ``timeout`` without a sample; a dump outside a recorded gap is never used."""
        if not self.active:
            return
        now = time.perf_counter() if now is None else now
        if self.arms and now - self._armed < self.timeout / 3:
            return
        faulthandler.dump_traceback_later(self.timeout, repeat=False, file=self.fh)
        self._armed = now
        self.arms += 1

    def offset(self) -> int:
        try:
            return os.fstat(self.fh.fileno()).st_size if self.fh is not None else 0
        except OSError:
            return 0

    def stop(self) -> str:
        """Stops the alarm; returns the dumps' text (the file is removed)."""
        if self.active:
            self.active = False
            faulthandler.cancel_dump_traceback_later()
        text = ""
        if self.fh is not None:
            try:
                self.fh.flush()
                self.fh.seek(0)
                text = self.fh.read()
            finally:
                self.fh.close()
                self.fh = None
                try:
                    os.remove(self.path)
                except OSError:
                    pass
        return text


# ------------------------------------------------------------------ the sampler's gaps


class Gaps:
    """The stack sampler's starvation: ``seen(t, key, offset)`` after every sample (perf_counter time,
    the sampler's signature key, the native dump file's length), in the sampler thread; it reads that
    thread's run-queue wait (``clock``: a ThreadRunQueue, or a stand-in with ``read()`` in tests)."""

    def __init__(self, interval: float, clock=None, switch_s: float | None = None):
        self.interval = interval
        self.threshold = max(GAP_FACTOR * interval, GAP_MIN_S)
        switch_s = sys.getswitchinterval() if switch_s is None else switch_s
        self.call_threshold = min(self.threshold, max(GAP_MIN_S, interval + CALL_GAP_SWITCHES * switch_s))
        self.clock = ThreadRunQueue() if clock is None else clock
        # (t0, t1, key before, key after, offset before, offset after, (run-queue s, timeslices) in the gap or
        # None, the sample after the gap's innermost (code, last instruction) when that is a call, else None)
        self.gaps: list[tuple] = []
        self._last = None

    def seen(self, t: float, key, offset: int, top=None) -> None:
        """``top``: the sample's innermost frame's (code, last instruction), or None."""
        rq = self.clock.read()
        last = self._last
        if last is not None and t - last[0] >= self.call_threshold:
            on_call = top if top is not None and at_call(*top) else None
            if on_call is not None or t - last[0] >= self.threshold:
                waited = tuple(a - b for a, b in zip(rq, last[3])) if rq is not None and last[3] is not None else None
                self.gaps.append((last[0], t, last[1], key, last[2], offset, waited, on_call))
        self._last = (t, key, offset, rq)

    def runqueue_record(self, steps: int) -> dict:
        """The sampler thread's run-queue wait over the window (first to last sample)."""
        c = self.clock
        close = getattr(c, "close", None)
        if close is not None:
            close()
        first, last = getattr(c, "first", None), getattr(c, "last", None)
        if first is None or last is None:
            return {"read": False, "reason": getattr(c, "error", None) or "no sample read it"}
        ms = (last - first) * 1000
        return {
            "read": True,
            "source": SCHEDSTAT,
            "window_ms": round(ms, 3),
            "ms_per_step": round(ms / steps, 3) if steps > 0 else None,
        }


def split_gap(excess: float, gc_s: float, runqueue: tuple[float, int] | None) -> tuple[float, float]:
    """(CPU-starved seconds, the rest) of a gap's excess over the interval.  ``runqueue``: the sampler
    thread's run-queue wait and timeslices in the gap.  Starved of CPU alone, the sampler is put on a CPU
    once or twice in a gap (its own wake-up; at most one switch interval's wait for a GIL the training
    thread runs Python with); waiting for a held GIL, it wakes every switch interval, and the run-queue
    wait of those wakes falls inside the hold.  So the wait of two timeslices' worth counts (all of it
    with one or two), less the time collections held the GIL (measured: the sampler could not have run
    then whatever the CPUs); the rest is GIL-held (GC, a call) or unexplained."""
    if runqueue is None or runqueue[0] <= 0:
        return 0.0, excess
    waited, slices = runqueue[0], runqueue[1]
    if slices > CPU_ONLY_SLICES:
        waited = waited * CPU_ONLY_SLICES / slices
    cpu = min(waited, max(0.0, excess - min(gc_s, excess)))
    return cpu, excess - cpu


def _dumped_place(sampler, text: str | None, off0: int, off1: int, thread_id: int):
    """(place, "faulthandler"): the frame most of the C watchdog's dumps inside the gap name, or (None, None)."""
    if text is None or off1 <= off0:
        return None, None
    places = [p for p in (dump_place(sampler, s) for s in parse_dumps(text[off0:off1], thread_id)) if p]
    if not places:
        return None, None
    counts: dict[str, int] = {}
    for p in places:
        counts[where_text(p)] = counts.get(where_text(p), 0) + 1
    best = max(sorted(counts), key=lambda w: counts[w])
    return next(p for p in places if where_text(p) == best), "faulthandler"


def summarize(
    gaps: Gaps,
    gcrec: GcRecorder | None,
    native_text: str | None,
    native_offsets: bool,
    sampler,
    thread_id: int,
    steps: int,
    native_info: dict,
) -> dict:
    """Each gap's CPU-starved part set apart (the sampler thread's run-queue wait), the rest attributed
    (GC / a named call / unnamed); the totals per cause and per call.  A gap whose rest with the interval
    would not reach its bar (``call_threshold`` when it ended on a call, else ``threshold``) is ``own`` when
    the sampler thread's own time on a CPU brought it under (its /proc reads), else ``cpu``: the sampler
    lacked a CPU, nothing held the GIL.  A call is named by the watchdog's dumps inside the gap, else
    by the call the gap ended on (gil_places.py); a gap that ended elsewhere stays unnamed."""
    by_cause = {"gc": 0.0, "call": 0.0, "unnamed": 0.0}
    cpu_total, cpu_gaps = 0.0, 0
    calls: dict[str, dict] = {}
    listed = []
    for t0, t1, _before, after, off0, off1, rq, on_call in gaps.gaps:
        gc_s = gcrec.covered_s(t0, t1) if gcrec is not None else 0.0
        own = rq[2] if rq is not None and len(rq) > 2 else 0.0  # the sampler thread's own work (its /proc reads)
        rest = max(0.0, (t1 - t0) - gaps.interval - own)
        cpu, excess = split_gap(rest, gc_s, rq)
        cpu_total += cpu
        entry = {
            "ms": round((t1 - t0) * 1000, 3),
            "gc_ms": round(gc_s * 1000, 3),
            "runqueue_ms": round(rq[0] * 1000, 3) if rq is not None else None,
            "timeslices": rq[1] if rq is not None else None,
            "own_ms": round(own * 1000, 3),
            "cpu_ms": round(cpu * 1000, 3),
        }
        bar = gaps.call_threshold if on_call is not None else gaps.threshold
        if gaps.interval + rest < bar:
            entry["cause"] = "own"  # the sampler was busy with its own reads, nothing kept it out
        elif gaps.interval + excess < bar:
            cpu_gaps += 1
            entry["cause"] = "cpu"
        elif gc_s >= GC_COVERS * excess:
            by_cause["gc"] += excess
            entry["cause"] = "gc"
        else:
            place, source = _dumped_place(sampler, native_text if native_offsets else None, off0, off1, thread_id)
            if place is None:
                place, source = call_place(sampler, after, on_call), RETURNED
            if place is None:
                by_cause["unnamed"] += excess
                entry["cause"] = "unnamed"
            else:
                by_cause["call"] += excess
                w = where_text(place)
                entry.update(cause="call", where=w, source=source)
                c = calls.setdefault(
                    w,
                    {
                        "where": w,
                        "lib": place.get("lib"),
                        "func": place["func"],
                        "file": place["file"],
                        "line": place["line"],
                        "source": source,
                        "gaps": 0,
                        "_s": 0.0,
                    },
                )
                c["gaps"] += 1
                c["_s"] += excess
        if len(listed) < 200:
            listed.append(entry)
    runqueue = gaps.runqueue_record(steps)
    top = sorted(calls.values(), key=lambda c: (-c["_s"], c["where"]))[:KEEP_CALLS]
    for c in top:
        c["ms_per_step"] = round(c.pop("_s") * 1000 / steps, 3) if steps > 0 else None
    return {
        "gap_threshold_s": round(gaps.threshold, 6),
        "gaps": len(gaps.gaps),
        "listed": listed,
        "starved_ms_per_step": {k: round(v * 1000 / steps, 3) for k, v in by_cause.items()} if steps > 0 else None,
        "cpu_starved_ms_per_step": round(cpu_total * 1000 / steps, 3) if steps > 0 and runqueue["read"] else None,
        "cpu_gaps": cpu_gaps,
        "runqueue": runqueue,
        "calls": top,
        "native": native_info,
    }
