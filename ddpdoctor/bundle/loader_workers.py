"""Inside the DataLoader's workers (``loader.workers.*``): what each worker process did while it fetched a
batch, from ``ranks/rank<R>/loader_workers/worker<id>-<pid>.jsonl`` (capture/agent/loader_workers.py).
Pure Python, no torch.

Each stack sample of a worker's main thread, taken while it fetched, is one of:

- ``lock``: blocked on a lock or semaphore (the futex, flock or fcntl/semop system calls, or a Python frame
  of ``threading``'s or ``multiprocessing``'s locks innermost) and not computing;
- ``wait``: blocked outside a lock: a file or socket read, a poll, a sleep (storage, network, a timer);
- ``compute``: running, or on a CPU or runnable waiting for one at least half the time since the previous
  sample (a thread that computes in Python is seen waiting for the GIL while the sampler holds it);
- ``other``: none of these (another call, or the call was not readable).

The workers' fetches overlap when several are in a fetch at once (``overlap``: their summed fetch time over
the time any is fetching); those that make progress at once are the overlap less the share of samples
waiting on a lock (``progressing``).  A loader whose workers fetch together but progress one at a time
queues on one lock: it is *serialised*, and more workers only lengthen the queue.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..frames import is_tool_frame

LOCK_CALLS = frozenset({"futex", "flock", "fcntl", "semop", "semtimedop"})
WAIT_CALLS = frozenset(
    {
        "read", "pread64", "readv", "preadv", "preadv2", "recvfrom", "recvmsg", "poll", "ppoll", "select",
        "pselect6", "epoll_wait", "epoll_pwait", "io_getevents", "io_uring_enter", "openat", "connect",
        "accept", "nanosleep", "clock_nanosleep", "write",
    }
)  # fmt: skip
# Python frames of a lock acquire (the innermost frame of the sample): threading's Condition / Semaphore /
# Event waits and multiprocessing's Lock / Semaphore (its __enter__ / acquire)
LOCK_FRAMES = (("/threading.py", ("acquire", "wait", "__enter__")), ("/multiprocessing/synchronize.py", None))
LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "<frozen ", "/lib/python3")
MIN_SAMPLES = 20  # fewer in-fetch samples on a rank: no shares for it


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str
    code: str = ""


@dataclass
class WorkerRecord:
    """One worker's fetches ``(start, end, cpu_s)`` and samples ``(time, call, busy_share, stack)``: busy is the
    share of the time since the previous sample on a CPU or runnable waiting for one."""

    worker_id: int
    open_since: float | None = None  # the start of the fetch open at the worker's last chunk, if one was
    last_at: float | None = None  # when the worker's last chunk was written
    fetches: list[tuple[float, float, float]] = field(default_factory=list)
    samples: list[tuple[float, str | None, float | None, tuple[Frame, ...]]] = field(default_factory=list)


def is_user_frame(f: Frame) -> bool:
    p = f.path.replace("\\", "/")
    return not is_tool_frame(p) and not any(part in p for part in LIBRARY_PARTS)


def lock_frame(stack: tuple[Frame, ...]) -> Frame | None:
    """The innermost frame when it is a lock's acquire in threading or multiprocessing."""
    if not stack:
        return None
    top = stack[0]
    p = top.path.replace("\\", "/")
    for suffix, functions in LOCK_FRAMES:
        if p.endswith(suffix) and (functions is None or top.function in functions):
            return top
    return None


def classify(call: str | None, cpu: float | None, stack: tuple[Frame, ...]) -> str:
    """lock / wait / compute / other for one sample (see the module's docstring)."""
    if call == "running" or (cpu is not None and cpu >= 0.5):
        return "compute"
    if call in LOCK_CALLS or (lock_frame(stack) is not None and call not in WAIT_CALLS):
        return "lock"
    if call in WAIT_CALLS:
        return "wait"
    return "other"


def fetch_overlap(intervals: list[tuple[float, float]]) -> float | None:
    """Summed interval time over the time covered by any interval (1.0: one at a time; W: all W together)."""
    ivs = sorted((a, b) for a, b in intervals if b > a)
    if not ivs:
        return None
    busy = sum(b - a for a, b in ivs)
    union, cur_a, cur_b = 0.0, ivs[0][0], ivs[0][1]
    for a, b in ivs[1:]:
        if a > cur_b:
            union += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    union += cur_b - cur_a
    return busy / union if union > 0 else None


def _clip(iv: tuple[float, float], window: tuple[float, float] | None) -> tuple[float, float]:
    if window is None:
        return iv
    return max(iv[0], window[0]), min(iv[1], window[1])


def place_text(f: Frame) -> str:
    """``file.py:line``: the file's name, as the other places the analysis names (logs/hang.py)."""
    return f"{f.path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{f.line}"


def user_place(stack: tuple[Frame, ...]) -> Frame | None:
    return next((f for f in stack if is_user_frame(f)), None)


def summarise_rank(workers: list[WorkerRecord], window: tuple[float, float] | None) -> dict | None:
    """One rank's workers over the window (all their records without one): shares of the in-fetch samples,
    the fetches' CPU share and overlap, and the user's place where the workers waited on a lock."""
    inside = (lambda t: window[0] <= t <= window[1]) if window else (lambda t: True)
    samples = [s for w in workers for s in w.samples if inside(s[0])]
    if len(samples) < MIN_SAMPLES:
        return None
    kinds = Counter(classify(call, cpu, stack) for _t, call, cpu, stack in samples)
    n = len(samples)
    out: dict = {f"{k}_share": round(kinds.get(k, 0) / n, 4) for k in ("lock", "wait", "compute", "other")}
    out["samples"] = n
    out["workers"] = len(workers)
    fetches = [(f, _clip((f[0], f[1]), window)) for w in workers for f in w.fetches]
    fetches = [(f, iv) for f, iv in fetches if iv[1] > iv[0]]
    wall = sum(f[1] - f[0] for f, _iv in fetches)
    if wall > 0:
        out["fetch_cpu_share"] = round(min(1.0, sum(f[2] for f, _iv in fetches) / wall), 4)
    overlap = fetch_overlap([iv for _f, iv in fetches])
    if overlap is not None:
        out["overlap"] = round(overlap, 3)
        out["progressing"] = round(overlap * (1.0 - out["lock_share"]), 3)
    places: Counter[Frame] = Counter()
    kinds_of_lock: Counter[str] = Counter()
    for _t, call, cpu, stack in samples:
        if classify(call, cpu, stack) != "lock":
            continue
        place = user_place(stack)
        if place is not None:
            places[place] += 1
        kinds_of_lock[lock_kind(call, stack)] += 1
    if places:
        place, count = places.most_common(1)[0]
        out["lock_place"] = place
        out["lock_place_share"] = round(count / max(1, kinds.get("lock", 0)), 4)
        out["lock_kind"] = kinds_of_lock.most_common(1)[0][0]
    return out


def lock_kind(call: str | None, stack: tuple[Frame, ...]) -> str:
    """What kind of lock a lock sample waits on, in the user's words."""
    top = lock_frame(stack)
    if top is not None and top.path.replace("\\", "/").endswith("/multiprocessing/synchronize.py"):
        return "a multiprocessing lock shared by the workers"
    if call in ("flock", "fcntl"):
        return "a file lock (flock/fcntl)"
    if top is not None:
        return "a threading lock"
    return "a lock"


def is_serialised(summary: dict, params: dict) -> bool:
    """Several workers fetch at once but about one of them makes progress: they queue on one lock."""
    return (
        summary.get("workers", 0) >= 2
        and summary.get("overlap", 0.0) >= params["loader_serial_min_overlap"]
        and summary.get("lock_share", 0.0) >= params["loader_serial_min_lock_share"]
        and summary.get("progressing", float("inf")) <= params["loader_serial_max_progressing"]
    )


UNFINISHED_KIND = {
    "lock": "waiting on a lock",
    "wait": "waiting on a read or a sleep",
    "compute": "computing",
    "gil": "holding the GIL (not even the probe's own thread could run)",
}
# a worker whose file went silent this long (and for at least half its open fetch) while its rank ran on: its
# sampler thread, which writes every 0.25 s while a fetch is open, could not run
GIL_SILENCE_MIN_S = 2.0


def held_gil(worker: WorkerRecord, end: float | None) -> bool:
    """The worker's last chunk shows a fetch open, none of its fetches ended after that fetch's start, and its file
    stayed silent from then to ``end`` (the rank's window stop) for ``GIL_SILENCE_MIN_S`` and half the fetch."""
    since, last = worker.open_since, worker.last_at
    if since is None or last is None or end is None or any(f[1] >= since for f in worker.fetches):
        return False
    silent = end - last
    return silent >= GIL_SILENCE_MIN_S and silent >= 0.5 * (end - since)


def unfinished_fetch(worker: WorkerRecord, end: float | None = None) -> dict | None:
    """The fetch a worker was in when its records end (samples after its last finished fetch): how long it had
    run by its last sample, what it did (the samples' most frequent kind) and the user's place most often on its
    stack. A worker stuck in ``__getitem__`` (a lock inherited locked from the forking process, a read that never
    returns) shows here; so does a worker ended mid-fetch by the rank's exit, for a fraction of a second."""
    done = max((f[1] for f in worker.fetches), default=float("-inf"))
    tail = [s for s in worker.samples if s[0] > done]
    if held_gil(worker, end) and end is not None and worker.open_since is not None:
        out: dict = {"worker": worker.worker_id, "seconds": round(end - worker.open_since, 1), "kind": "gil"}
        places = Counter(p for *_x, stack in tail if (p := user_place(stack)) is not None)
        if places:  # where its samples saw it before the GIL was taken (the call itself may be further on)
            out["place"] = places.most_common(1)[0][0]
        return out
    if len(tail) < 2:
        return None
    kinds = Counter(classify(call, cpu, stack) for _t, call, cpu, stack in tail)
    places = Counter(p for *_x, stack in tail if (p := user_place(stack)) is not None)
    out = {
        "worker": worker.worker_id,
        "seconds": round(tail[-1][0] - tail[0][0], 1),
        "kind": kinds.most_common(1)[0][0],
    }
    if places:
        out["place"] = places.most_common(1)[0][0]
    return out


def unfinished_facts(per_rank: dict[int, list[WorkerRecord]], ends: dict[int, float] | None = None) -> dict:
    """``loader.workers.unfinished.*``: the longest unfinished fetch of any rank's workers, with how many of that
    rank's workers were in one; ``ends``: each rank's window stop (to see a worker that went silent)."""
    ends = ends or {}
    found = {r: [u for w in ws if (u := unfinished_fetch(w, ends.get(r))) is not None] for r, ws in per_rank.items()}
    best = max(((r, u) for r, us in found.items() for u in us), key=lambda x: (x[1]["seconds"], -x[0]), default=None)
    if best is None:
        return {}
    rank, u = best
    facts: dict = {
        "loader.workers.unfinished.rank": rank,
        "loader.workers.unfinished.worker": u["worker"],
        "loader.workers.unfinished.seconds": u["seconds"],
        "loader.workers.unfinished.workers": len(found[rank]),
        "loader.workers.unfinished.kind": UNFINISHED_KIND.get(u["kind"], "in a call it did not return from"),
    }
    place = u.get("place")
    if isinstance(place, Frame):
        facts["loader.workers.unfinished.place"] = place_text(place)
        facts["loader.workers.unfinished.function"] = place.function
        if place.code:
            facts["loader.workers.unfinished.code"] = place.code
    return facts


def read_worker_file(path: Path) -> WorkerRecord | None:
    """A worker's JSON lines; a torn last line (a killed worker) and bad lines are skipped."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    rec: WorkerRecord | None = None
    stacks: dict[int, tuple[Frame, ...]] = {}
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if not isinstance(d, dict):
            continue
        if d.get("kind") == "start" and isinstance(d.get("worker_id"), int):
            rec = WorkerRecord(worker_id=d["worker_id"])
            continue
        if rec is None or d.get("kind") != "chunk":
            continue
        for sid, frames in (d.get("stacks") or {}).items():
            try:
                stacks[int(sid)] = tuple(
                    Frame(str(f[0]), int(f[1]), str(f[2]), str(f[3]) if len(f) > 3 else "") for f in frames
                )
            except (TypeError, ValueError, IndexError):
                continue
        if isinstance(d.get("at"), (int, float)):
            rec.last_at = float(d["at"])
            rec.open_since = float(d["open"]) if isinstance(d.get("open"), (int, float)) else None
        for f in d.get("fetches") or []:
            try:
                rec.fetches.append((float(f[0]), float(f[1]), float(f[2])))
            except (TypeError, ValueError, IndexError):
                continue
        for s in d.get("samples") or []:
            try:
                # on a CPU, or runnable waiting for one (a busy host), since the previous sample
                busy = None if s[2] is None else float(s[2]) + (float(s[4]) if len(s) > 4 and s[4] is not None else 0.0)
                rec.samples.append((float(s[0]), s[1] if isinstance(s[1], str) else None, busy, stacks[int(s[3])]))
            except (TypeError, ValueError, IndexError, KeyError):
                continue
    return rec


def read_rank_workers(rank_dir: Path) -> list[WorkerRecord]:
    folder = rank_dir / "loader_workers"
    if not folder.is_dir():
        return []
    return [r for p in sorted(folder.glob("worker*.jsonl")) if (r := read_worker_file(p)) is not None]


def _window(settings: dict) -> tuple[float, float] | None:
    w = settings.get("loader_window")
    if not isinstance(w, dict):
        return None
    a, b = w.get("t_start"), w.get("t_stop")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > a:
        return float(a), float(b)
    return None


def loader_worker_facts(rank_dirs: dict[int, Path], ranks: dict[int, dict], params: dict) -> dict:
    """``loader.workers.*`` of the rank whose workers waited most on a lock (the loader is called serialised
    when that rank's is), with ``.per_rank`` companions for the shares."""
    per: dict[int, dict] = {}
    records = {r: read_rank_workers(rank_dirs[r]) for r in sorted(rank_dirs)}
    for r, workers in records.items():
        if workers and (s := summarise_rank(workers, _window(ranks.get(r) or {}))) is not None:
            per[r] = s
    stops = {r: w[1] for r in records if (w := _window(ranks.get(r) or {})) is not None}
    unfinished = unfinished_facts(records, stops)
    if not per:
        return unfinished
    rank = max(per, key=lambda r: (per[r]["lock_share"], -r))
    s = per[rank]
    facts: dict = {"loader.workers.rank": rank, "loader.workers.samples": s["samples"]}
    for key in ("lock_share", "wait_share", "compute_share", "fetch_cpu_share", "overlap", "progressing"):
        if key in s:
            facts[f"loader.workers.{key}"] = s[key]
            vals = {r: x[key] for r, x in per.items() if key in x}
            if len(vals) > 1 and len(set(vals.values())) > 1:
                facts[f"loader.workers.{key}.per_rank"] = vals
    facts["loader.workers.serialised"] = is_serialised(s, params)
    place = s.get("lock_place")
    if isinstance(place, Frame):
        facts["loader.workers.lock_place"] = place_text(place)
        facts["loader.workers.lock_function"] = place.function
        if place.code:
            facts["loader.workers.lock_code"] = place.code
        facts["loader.workers.lock_kind"] = s["lock_kind"]
    facts.update(unfinished)
    return facts
