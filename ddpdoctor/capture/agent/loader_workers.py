"""Part of the capture agent (standard library only): what each DataLoader worker process does while it
fetches a batch, so a loader whose workers queue on one lock is told from one that waits on storage in
parallel and from one that computes.

A fork-start worker runs ``torch.utils.data._utils.worker._worker_loop``, which the patch table wraps; in
the worker its hooks go to a ``join.Pending`` (membership.py) that carries a ``WorkerProbe`` for the rank's
folder.  ``WorkerProbe.worker_args`` (the wrapper's ``args`` hook, run in the worker before the loop) wraps
the worker's index and result queues and starts one sampler thread:

- fetch intervals: from the task the index queue hands over to the result the worker puts back (the
  dataset's ``__getitem__`` calls and the collate), each with the worker's main-thread CPU time over it
  (``time.thread_time``), on ``time.perf_counter`` (CLOCK_MONOTONIC on Linux: the same clock as the rank's
  window in ``loader_window``);
- while a fetch runs, every ``SAMPLE_INTERVAL_S`` (none between fetches): the worker's main-thread Python stack
  (``sys._current_frames``, innermost first, up to the worker loop, each frame with its source line), the system call it is blocked in
  (``/proc/self/task/<tid>/syscall``: futex = a lock or semaphore, read/recv/poll = I/O, nanosleep, or
  running) and its CPU share since the previous sample (``schedstat``; a thread that computes in Python
  is seen waiting for the GIL while the sampler holds it, so the CPU share decides "computing").

Written as JSON lines to ``<rank folder>/loader_workers/worker<id>-<pid>.jsonl`` every quarter second and at
the loop's end (a killed worker keeps what was flushed); stacks are interned (a ``stacks`` table per
chunk).  ``bundle/loader_workers.py`` reads it.  Nothing raises into the worker: a failing probe stops.
"""

from __future__ import annotations

import json
import linecache
import os
import platform
import sys
import threading
import time

SAMPLE_INTERVAL_S = 0.04  # 25 Hz while a fetch runs (each wake-up costs ~0.1 ms of CPU on a busy VM)
FLUSH_INTERVAL_S = 0.25  # the rank may end its workers (SIGTERM) soon after the window: little is lost
MAX_FRAMES = 24
MAX_RECORDS = 20000  # per worker file: samples + fetches (~5 min of fetching); the probe ends there
SWITCH = "DDPDOCTOR_LOADER_WORKER_PROBE"  # "0": no probe in the workers (overhead measurements)
WORKER_LOOP_FILE = "/torch/utils/data/_utils/worker.py"

# system call numbers the sampler names (the rest are written as "nr<N>")
_SYSCALLS = {
    "x86_64": {
        0: "read",
        1: "write",
        7: "poll",
        17: "pread64",
        19: "readv",
        23: "select",
        35: "nanosleep",
        42: "connect",
        43: "accept",
        45: "recvfrom",
        47: "recvmsg",
        61: "wait4",
        65: "semop",
        72: "fcntl",
        73: "flock",
        202: "futex",
        208: "io_getevents",
        220: "semtimedop",
        230: "clock_nanosleep",
        232: "epoll_wait",
        257: "openat",
        270: "pselect6",
        271: "ppoll",
        281: "epoll_pwait",
        295: "preadv",
        327: "preadv2",
        426: "io_uring_enter",
    },
    "aarch64": {
        4: "io_getevents",
        22: "epoll_pwait",
        25: "fcntl",
        32: "flock",
        56: "openat",
        63: "read",
        64: "write",
        65: "readv",
        67: "pread64",
        69: "preadv",
        72: "pselect6",
        73: "ppoll",
        98: "futex",
        101: "nanosleep",
        115: "clock_nanosleep",
        192: "semtimedop",
        193: "semop",
        203: "connect",
        207: "recvfrom",
        212: "recvmsg",
        286: "preadv2",
        426: "io_uring_enter",
    },
}


class _ProcFile:
    """A /proc file kept open and re-read from its start: one system call (one release of the GIL, which a
    worker computing in Python holds up to a switch interval each time) per reading instead of three."""

    def __init__(self, path: str):
        try:
            self.fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self.fd = None

    def read(self) -> str | None:
        if self.fd is None:
            return None
        try:
            return os.pread(self.fd, 512, 0).decode("ascii", "replace")
        except OSError:
            return None

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def _source_line(path: str, line: int) -> str:
    try:
        return linecache.getline(path, line).strip()[:200]
    except Exception:  # an unreadable or odd file: no code shown
        return ""


def syscall_name(text: str | None, table: dict) -> str | None:
    """What ``/proc/.../syscall`` says the thread does: "running", a call's name, or None (unreadable)."""
    if not text:
        return None
    head = text.split(None, 1)[0]
    if head == "running":
        return "running"
    try:
        nr = int(head)
    except ValueError:
        return None
    return "kernel" if nr < 0 else table.get(nr, f"nr{nr}")


def run_ns(text: str | None) -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable waiting for one) from a schedstat file."""
    try:
        fields = text.split() if text else []
        return int(fields[0]), int(fields[1])
    except (ValueError, IndexError):
        return None


class _Recorder:
    """One worker's records: fetch intervals appended by the worker's main thread, samples and the file
    written by the sampler thread."""

    def __init__(self, path: str, header: dict):
        self.path = path
        self.header = header
        self.fetches: list = []
        self.samples: list = []
        self.open_fetch: tuple | None = None  # (perf_counter, thread_time) of the running fetch
        self.stack_ids: dict = {}
        self.new_stacks: dict = {}
        self.records = 0
        self.failed = False
        self.done = threading.Event()
        self.fetching = threading.Event()  # set while a fetch runs: the sampler sleeps on it between fetches

    # ---- the worker's main thread (the queue wrappers)
    def fetch_started(self) -> None:
        self.open_fetch = (time.perf_counter(), time.thread_time())
        self.fetching.set()

    def fetch_ended(self) -> None:
        start = self.open_fetch
        if start is None:
            return
        self.open_fetch = None
        self.fetching.clear()
        if self.records < MAX_RECORDS:
            self.records += 1
            now = time.perf_counter()
            self.fetches.append((round(start[0], 6), round(now, 6), round(time.thread_time() - start[1], 6)))

    # ---- the sampler thread
    def stack_id(self, frame) -> int:
        frames = []
        while frame is not None and len(frames) < MAX_FRAMES:
            code = frame.f_code
            if code.co_filename.replace("\\", "/").endswith(WORKER_LOOP_FILE) and code.co_name == "_worker_loop":
                break
            frames.append((code.co_filename, frame.f_lineno, code.co_name))
            frame = frame.f_back
        key = tuple(frames)
        sid = self.stack_ids.get(key)
        if sid is None:
            sid = self.stack_ids[key] = len(self.stack_ids)
            # each frame with its source line (read once per new stack: the place a rule names shows its code)
            self.new_stacks[str(sid)] = [[*f, _source_line(f[0], f[1])] for f in key]
        return sid

    def flush(self) -> None:
        if self.failed:
            return
        n_f, n_s = len(self.fetches), len(self.samples)
        fetches, samples = self.fetches[:n_f], self.samples[:n_s]
        del self.fetches[:n_f], self.samples[:n_s]
        chunk: dict = {"kind": "chunk"}
        if self.header:
            chunk, self.header = {**self.header, "kind": "start"}, {}
            self._write(chunk)
            chunk = {"kind": "chunk"}
        if not (fetches or samples or self.new_stacks):
            return
        # when it was written and the fetch open then: a fetch open at the last chunk with no chunk after it while
        # the rank ran on is a worker whose sampler thread could not run (its main thread held the GIL)
        fetch = self.open_fetch
        chunk.update(at=round(time.perf_counter(), 4), open=None if fetch is None else round(fetch[0], 6))
        chunk.update(fetches=fetches, samples=samples, stacks=self.new_stacks)
        self.new_stacks = {}
        self._write(chunk)

    def _write(self, rec: dict) -> None:
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        except (OSError, TypeError, ValueError):
            self.failed = True  # a full disk or a removed folder: the worker goes on unrecorded


def _sample_loop(rec: _Recorder, main_ident: int, main_tid: int) -> None:
    table = _SYSCALLS.get(platform.machine(), {})
    sc_file = _ProcFile(f"/proc/self/task/{main_tid}/syscall")
    st_file = _ProcFile(f"/proc/self/task/{main_tid}/schedstat")
    last_flush = last_t = time.perf_counter()
    last_run = run_ns(st_file.read())
    try:
        while not rec.done.is_set():
            if rec.open_fetch is None:  # idle between fetches: no wake-ups but the flush's (each costs CPU)
                rec.fetching.wait(FLUSH_INTERVAL_S)
                if rec.open_fetch is not None:  # the CPU shares are of the fetch from its start
                    last_run, last_t = run_ns(st_file.read()), time.perf_counter()
            elif rec.done.wait(SAMPLE_INTERVAL_S):
                break
            now = time.perf_counter()
            if rec.open_fetch is not None and rec.records < MAX_RECORDS and now - last_t >= SAMPLE_INTERVAL_S / 2:
                call = syscall_name(sc_file.read(), table)
                ran = run_ns(st_file.read())
                cpu = queued = None
                if ran is not None and last_run is not None and now > last_t:
                    cpu = round(min(1.0, (ran[0] - last_run[0]) / 1e9 / (now - last_t)), 2)
                    queued = round(min(1.0, (ran[1] - last_run[1]) / 1e9 / (now - last_t)), 2)
                last_run, last_t = ran, now
                frame = sys._current_frames().get(main_ident)
                if frame is not None:
                    rec.records += 1
                    rec.samples.append((round(now, 4), call, cpu, rec.stack_id(frame), queued))
                del frame
            if now - last_flush >= FLUSH_INTERVAL_S:
                rec.flush()
                last_flush = now
            if rec.records >= MAX_RECORDS:  # a long run (--keep-going): the window is long past, the probe ends
                break
    except Exception:  # the probe stops, the worker goes on
        pass
    sc_file.close()
    st_file.close()
    rec.flush()


class _IndexQueue:
    """The worker's index queue: a task handed over starts a fetch."""

    def __init__(self, inner, rec: _Recorder):
        self._inner, self._rec = inner, rec

    def get(self, *args, **kwargs):
        r = self._inner.get(*args, **kwargs)
        if isinstance(r, tuple):  # (send_idx, index): a batch to fetch (None ends the loop)
            self._rec.fetch_started()
        return r

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _DataQueue:
    """The worker's result queue: a result put back ends the fetch; its close() ends the probe."""

    def __init__(self, inner, rec: _Recorder, stop):
        self._inner, self._rec, self._stop = inner, rec, stop

    def put(self, *args, **kwargs):
        self._rec.fetch_ended()
        return self._inner.put(*args, **kwargs)

    def close(self):
        self._stop()
        return self._inner.close()

    def __getattr__(self, name):
        return getattr(self._inner, name)


class WorkerProbe:
    """Carried by a forked child's ``join.Pending``: ``worker_args`` is the ``_worker_loop`` patch's args hook."""

    def __init__(self, rank_dir: str, env=None):
        self.rank_dir = rank_dir
        self.enabled = (env if env is not None else os.environ).get(SWITCH, "1") != "0"

    def worker_args(self, _orig, args, kwargs):
        if not self.enabled or len(args) < 12 or kwargs:
            return args, kwargs
        worker_id, num_workers = args[10], args[11]
        folder = os.path.join(self.rank_dir, "loader_workers")
        os.makedirs(folder, exist_ok=True)
        header = {
            "schema": 1,
            "pid": os.getpid(),
            "worker_id": worker_id,
            "num_workers": num_workers,
            "interval_s": SAMPLE_INTERVAL_S,
            "started": round(time.perf_counter(), 6),
        }
        rec = _Recorder(os.path.join(folder, f"worker{worker_id}-{os.getpid()}.jsonl"), header)
        thread = threading.Thread(
            target=_sample_loop,
            args=(rec, threading.get_ident(), threading.get_native_id()),
            name="ddpdoctor-loader-worker-sampler",
            daemon=True,
        )

        def stop():
            rec.done.set()
            rec.fetching.set()
            thread.join(timeout=1.0)

        thread.start()
        new = list(args)
        new[2], new[3] = _IndexQueue(args[2], rec), _DataQueue(args[3], rec, stop)
        return tuple(new), kwargs
