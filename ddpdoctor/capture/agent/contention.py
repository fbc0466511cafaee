"""Part of the capture agent: the host contention probes read at the profiled window's start and stop
(``evidence.py`` runs them): the training thread's and the process's CPU time and context switches
(getrusage), the CPU time of its children, the host's CPU time split (/proc/stat), runnable tasks
(/proc/loadavg), usable CPUs (sched_getaffinity).  Linux-specific readings degrade to None; standard
library only.
"""

from __future__ import annotations

import os
import threading
import time


def read_proc_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def proc_stat_times(text: str | None) -> dict | None:
    """The host's aggregate CPU times from /proc/stat's first line, in seconds:
    total, idle (idle + iowait), steal (None when the kernel has no steal column)."""
    if not text:
        return None
    first = text.split("\n", 1)[0].split()
    if len(first) < 5 or first[0] != "cpu":
        return None
    try:
        vals = [int(x) for x in first[1:]]
    except ValueError:
        return None
    hz = _clock_ticks()
    # user nice system idle iowait irq softirq steal [guest guest_nice: already inside user/nice]
    total = sum(vals[:8])
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    steal = vals[7] if len(vals) > 7 else None
    return {"total_s": total / hz, "idle_s": idle / hz, "steal_s": None if steal is None else steal / hz}


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (ValueError, OSError, AttributeError):
        return 100


def runnable_tasks(loadavg: str | None) -> int | None:
    """Runnable scheduling entities now: the numerator of /proc/loadavg's 4th field."""
    try:
        return int(loadavg.split()[3].split("/")[0])
    except (AttributeError, IndexError, ValueError):
        return None


def own_runnable_threads() -> int | None:
    """Runnable tasks of the job on this rank now: this process's threads in state R (the reading thread,
    running to read them, left out) and its child processes in state R (DataLoader workers).  Set against
    /proc/loadavg's runnable count, what is left is other processes' (bundle/evidence.py)."""

    def state(path: str) -> str | None:
        text = read_proc_text(path)
        return text.rsplit(")", 1)[1].split()[0] if text and ")" in text else None

    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    n, kids = -1, set()
    for tid in tids:
        n += state(f"/proc/self/task/{tid}/stat") == "R"
        text = read_proc_text(f"/proc/self/task/{tid}/children")
        if text:
            kids.update(text.split())
    n += sum(state(f"/proc/{pid}/stat") == "R" for pid in kids)
    return max(0, n)


def _usage(who) -> dict | None:
    try:
        import resource

        ru = resource.getrusage(who)
        return {
            "cpu_s": ru.ru_utime + ru.ru_stime,
            "utime_s": ru.ru_utime,
            "stime_s": ru.ru_stime,
            "nvcsw": ru.ru_nvcsw,
            "nivcsw": ru.ru_nivcsw,
        }
    except (ImportError, AttributeError, ValueError, OSError):
        return None


def _thread_usage() -> dict | None:
    try:
        import resource

        return _usage(resource.RUSAGE_THREAD)  # Linux only (AttributeError elsewhere)
    except (ImportError, AttributeError):
        return None


def _children_cpu_s() -> float | None:
    """CPU seconds of this process's live children (DataLoader workers, the fd tee) from
    /proc/<pid>/stat, plus the reaped ones (RUSAGE_CHILDREN)."""
    try:
        import resource

        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        total = ru.ru_utime + ru.ru_stime
    except (ImportError, AttributeError, ValueError, OSError):
        return None
    pids = set()
    try:
        for tid in os.listdir("/proc/self/task"):
            text = read_proc_text(f"/proc/self/task/{tid}/children")
            if text:
                pids.update(text.split())
    except OSError:
        return None
    hz = _clock_ticks()
    for pid in pids:
        text = read_proc_text(f"/proc/{pid}/stat")
        if not text or ")" not in text:
            continue
        fields = text.rsplit(")", 1)[1].split()
        try:
            total += (int(fields[11]) + int(fields[12])) / hz  # utime, stime (fields 14, 15)
        except (IndexError, ValueError):
            continue
    return total


def contention_snapshot() -> dict:
    """One reading of every counter; taken in the training thread at window start and stop."""
    return {
        "time": time.time(),
        "thread_ident": threading.get_ident(),
        "thread": _thread_usage(),
        "process": _usage(0),
        "children_cpu_s": _children_cpu_s(),  # 0 = RUSAGE_SELF
        "proc_stat": proc_stat_times(read_proc_text("/proc/stat")),
    }


def contention_record(start: dict, stop: dict, load_samples: list[int], torch_threads, env) -> dict:
    """What one rank reports about contention over its window (deltas, None where a probe failed)."""
    wall = stop["time"] - start["time"]
    out: dict = {"wall_s": round(wall, 6)}
    t0, t1 = start.get("thread"), stop.get("thread")
    same_thread = start.get("thread_ident") == stop.get("thread_ident")
    if t0 and t1 and same_thread:
        out["thread"] = {k: round(t1[k] - t0[k], 6) for k in t0}
    else:
        out["thread"] = None
    p0, p1 = start.get("process"), stop.get("process")
    out["process_cpu_s"] = round(p1["cpu_s"] - p0["cpu_s"], 6) if p0 and p1 else None
    c0, c1 = start.get("children_cpu_s"), stop.get("children_cpu_s")
    out["children_cpu_s"] = round(max(0.0, c1 - c0), 6) if c0 is not None and c1 is not None else None
    s0, s1 = start.get("proc_stat"), stop.get("proc_stat")
    if s0 and s1:
        out["host"] = {
            "total_s": round(s1["total_s"] - s0["total_s"], 6),
            "idle_s": round(s1["idle_s"] - s0["idle_s"], 6),
            "steal_s": (
                round(s1["steal_s"] - s0["steal_s"], 6)
                if s0["steal_s"] is not None and s1["steal_s"] is not None
                else None
            ),
        }
    else:
        out["host"] = None
    out["runnable_samples"] = list(load_samples)
    out["host_cpus"] = os.cpu_count()
    try:
        out["affinity_cpus"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        out["affinity_cpus"] = None
    out["torch_threads"] = torch_threads
    out["local_world_size"] = _int(env.get("LOCAL_WORLD_SIZE"))
    return out


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
