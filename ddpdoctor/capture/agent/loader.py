"""Part of the capture agent: how the DataLoader spends the profiled
window, to tell a loader that computes from a loader that waits (storage, network, locks).

- the training thread's wall and CPU time inside ``next(loader)`` (the wait for a batch; with
  ``num_workers=0`` it is the loading itself) and the batches it returned in the window;
- the CPU time of the DataLoader's worker processes over the window: utime + stime from
  ``/proc/<pid>/stat`` of the workers alive at the window's start and end, plus the reaped
  children's (``RUSAGE_CHILDREN``), so a worker that ends inside the window (workers restarted at
  an epoch start) is counted up to its end.

Written into ``settings.json`` as ``loader_window``; ``ddpdoctor/bundle/loader.py`` turns it into
facts.  Linux-only probes degrade to None; standard library only; nothing raises into the script.
"""

from __future__ import annotations

import os
import threading
import time
import weakref


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (ValueError, OSError, AttributeError):
        return 100


def pid_cpu_s(pid: int) -> float | None:
    """utime + stime of one process, in seconds (None when it is gone or /proc is not there)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
        fields = text.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _clock_ticks()  # fields 14 and 15 of stat
    except (OSError, IndexError, ValueError):
        return None


def schedstat(path: str) -> tuple[float, float] | None:
    """(CPU seconds, seconds runnable but waiting for a CPU) of one task from a schedstat file."""
    try:
        with open(path, encoding="ascii") as fh:
            run_ns, wait_ns = fh.read().split()[:2]
        return int(run_ns) / 1e9, int(wait_ns) / 1e9
    except (OSError, ValueError):
        return None


def pid_runqueue_s(pid: int) -> float | None:
    """Seconds every thread of a process spent runnable but waiting for a CPU (summed over /proc/<pid>/task)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    vals = [schedstat(f"/proc/{pid}/task/{t}/schedstat") for t in tids]
    vals = [v for v in vals if v is not None]
    return sum(v[1] for v in vals) if vals else None


def _reaped_children_cpu_s() -> float | None:
    try:
        import resource

        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime
    except (ImportError, AttributeError, ValueError, OSError):
        return None


class LoaderTiming:
    """Owned by the agent: ``iterator_created`` (each ``iter(loader)``), ``entered`` / ``returned``
    around each ``next()``, ``window_start`` / ``window_stop`` from the profiler window."""

    def __init__(self):
        self._iters: list = []  # weakrefs to the loader iterators (their _workers)
        self.drain: dict | None = None  # the newest iterator's prefetched and returned batches
        self._latest = None  # weakref to the newest iterator
        self.active = False
        self._t0 = self._c0 = None
        self._thread = None
        self._start: dict | None = None
        self._rec: dict | None = None
        self.next_wall_s = self.next_cpu_s = 0.0
        self.next_runqueue_s = 0.0  # inside next(): runnable, waiting for a CPU (a contended host)
        self._q0 = None
        self._train_q0 = None  # the training thread's run-queue wait at the window's start (schedstat)
        self.batches = 0
        self.max_workers = 0

    def iterator_created(self, it) -> None:
        self._iters = [r for r in self._iters if r() is not None][-8:] + [weakref.ref(it)]
        # (torch sets _prefetch_factor after the base __init__ this is called from: read at the first probe)
        self.drain = {"prefetched": None, "consumed": 0}
        self._latest = weakref.ref(it)

    def drain_state(self) -> tuple[int, int, int | None] | None:
        """(batches the newest loader iterator prefetched at its start, batches returned from it since,
        batches ready and waiting now) for the step window's steady start (window.StepWindow); None before
        any loader."""
        d = self.drain
        if d is None:
            return None
        it = self._latest() if self._latest is not None else None
        if d["prefetched"] is None and it is not None:
            d["prefetched"] = prefetched_batches(it)
        return d["prefetched"] or 0, d["consumed"], ready_batches(it) if it is not None else None

    def _worker_pids(self) -> list[int]:
        pids = []
        for ref in self._iters:
            it = ref()
            for w in getattr(it, "_workers", None) or []:
                pid = getattr(w, "pid", None)
                if isinstance(pid, int):  # no is_alive(): it may reap the worker (waitpid)
                    pids.append(pid)
        return pids

    def _snapshot(self) -> dict:
        pids = self._worker_pids()
        self.max_workers = max(self.max_workers, len(pids))
        cpu = [pid_cpu_s(p) for p in pids]
        queue = [pid_runqueue_s(p) for p in pids]
        return {
            "time": time.perf_counter(),
            "pids": pids,
            "live_cpu_s": sum(c for c in cpu if c is not None),
            "reaped_cpu_s": _reaped_children_cpu_s(),
            "runqueue": dict(zip(pids, queue)),
        }

    # ---- around next(loader): the training thread only
    def entered(self) -> None:
        if self.active and threading.get_ident() == self._thread:
            self._t0, self._c0 = time.perf_counter(), time.thread_time()
            st = schedstat("/proc/thread-self/schedstat")
            self._q0 = st[1] if st else None

    def returned(self) -> None:
        if self.drain is not None:
            self.drain["consumed"] += 1
        if self._t0 is not None and self.active:
            self.next_wall_s += time.perf_counter() - self._t0
            self.next_cpu_s += time.thread_time() - self._c0
            st = schedstat("/proc/thread-self/schedstat") if self._q0 is not None else None
            if st is not None and self.next_runqueue_s is not None:
                self.next_runqueue_s += max(0.0, st[1] - self._q0)
            else:
                self.next_runqueue_s = None
            self.batches += 1
        self._t0 = None

    # ---- the window
    def window_start(self) -> None:
        self.next_wall_s = self.next_cpu_s = self.next_runqueue_s = 0.0
        self.batches = self.max_workers = 0
        self._thread = threading.get_ident()
        st = schedstat("/proc/thread-self/schedstat")
        self._train_q0 = st[1] if st else None
        self._start = self._snapshot()
        self.active = True

    def window_stop(self, num_workers) -> None:
        if not self.active:
            return
        self.active = False
        # the training thread's whole run-queue wait over the window (runnable, no CPU free): read only on the
        # thread that started the window (a stop from another thread, e.g. at exit, cannot read it)
        st = schedstat("/proc/thread-self/schedstat") if threading.get_ident() == self._thread else None
        train_queue = round(max(0.0, st[1] - self._train_q0), 6) if st and self._train_q0 is not None else None
        start, stop = self._start, self._snapshot()
        wall = stop["time"] - start["time"]
        # a pid alive at both ends: its delta; at the start only: reaped since (RUSAGE_CHILDREN has its whole
        # life, the start reading is subtracted); at the end only: its CPU since it started
        if start["reaped_cpu_s"] is not None and stop["reaped_cpu_s"] is not None:
            workers_cpu = (stop["live_cpu_s"] + stop["reaped_cpu_s"]) - (start["live_cpu_s"] + start["reaped_cpu_s"])
            workers_cpu = round(max(0.0, workers_cpu), 4)
        else:
            workers_cpu = None
        # time the workers alive at both ends spent runnable without a CPU (a contended host): not waiting
        q0, q1 = start["runqueue"], stop["runqueue"]
        both = [p for p in q1 if q1[p] is not None and q0.get(p) is not None]
        workers_queue = round(sum(q1[p] - q0[p] for p in both), 4) if both else None
        self._rec = {
            "schema": 1,
            "wall_s": round(wall, 6),
            "t_start": round(start["time"], 6),  # perf_counter: the workers' fetches (loader_workers.py) share it
            "t_stop": round(stop["time"], 6),
            "batches": self.batches,
            "next_runqueue_s": None if self.next_runqueue_s is None else round(self.next_runqueue_s, 6),
            "workers_runqueue_s": workers_queue,
            "train_runqueue_s": train_queue,
            "next_wall_s": round(self.next_wall_s, 6),
            "next_cpu_s": round(self.next_cpu_s, 6),
            "num_workers": num_workers,
            "workers_seen": self.max_workers,
            "workers_cpu_s": workers_cpu if (num_workers or self.max_workers) else None,
        }

    def record(self) -> dict | None:
        return self._rec


def prefetched_batches(it) -> int:
    """Batches a multi-process loader iterator requests at its start (torch's
    ``_MultiProcessingDataLoaderIter`` queues ``prefetch_factor x num_workers``); 0 in-process."""
    try:
        return max(0, int(getattr(it, "_num_workers", 0) or 0) * int(getattr(it, "_prefetch_factor", 0) or 0))
    except (TypeError, ValueError):
        return 0


def ready_batches(it) -> int | None:
    """Batches that arrived from the workers and wait to be returned: out-of-order arrivals held in
    ``_task_info`` (entries ``(worker_id, data)``) plus the result queue's length; None when unreadable."""
    try:
        held = sum(1 for v in dict(it._task_info).values() if isinstance(v, tuple) and len(v) == 2)
        queued = it._data_queue.qsize()
        return int(held + queued)
    except Exception:  # an in-process iterator, a platform without qsize(): unknown
        return None


# ------------------------------------------------------------------ what one epoch of the loader covers

FINGERPRINT_ITEMS = 3  # dataset items hashed: the first, the middle and the last


def samples_per_epoch(loader) -> int | None:
    """Samples the loader's sampler yields per epoch on this rank: len(sampler) under torch's own
    BatchSampler; None for a custom batch sampler (its length counts batches) or a sampler without length."""
    bs = getattr(loader, "batch_sampler", None)
    inner = getattr(bs, "sampler", None) if bs is not None else getattr(loader, "sampler", None)
    if bs is not None and type(bs).__name__ != "BatchSampler":
        return None
    try:
        return int(len(inner))
    except Exception:  # no length: unknown
        return None


def dataset_fingerprint(dataset, n: int, torch, hash_fn) -> str | None:
    """A content hash of a few fixed items of a map-style dataset (indices 0, n // 2, n - 1), read with
    every random generator seeded alike (and restored after), so two ranks that load the same data get
    the same hash whatever their own seeds and random augmentations, and ranks whose data differ do not.
    Read once, in the training process, at the loader's first iter()."""
    import random
    import sys

    idx = sorted({0, n // 2, n - 1})[:FINGERPRINT_ITEMS]
    np = sys.modules.get("numpy")
    py_state = random.getstate()
    np_state = np.random.get_state() if np is not None else None
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            random.seed(0)
            if np is not None:
                np.random.seed(0)
            items = [dataset[i] for i in idx]
    finally:
        random.setstate(py_state)
        if np is not None:
            np.random.set_state(np_state)
    return f"{type(dataset).__name__}:{n}:{hash_fn(items)}"
