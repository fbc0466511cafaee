"""Part of the capture agent (loaded by path beside it): evidence recorded over the profiled
window, for the verdict's "is this the workload or the machine?" questions.

- host contention: the training thread's and the process's CPU time and context switches
  (getrusage), the host's CPU time split (/proc/stat), runnable tasks sampled in the window
  (/proc/loadavg), usable CPUs (sched_getaffinity), torch's intra-op threads;
- where the training thread's Python time goes (``agent_stacks.py``: a sampler thread that
  runs during the window only), tagged with the loop phase this part tracks (inside the
  DataLoader, between the batch and the DDP forward = input work, the rest of the step);
- content fingerprints of the first batches each DataLoader returns, and what shards them.

Everything Linux-specific degrades to None; nothing here raises into the user's program
(the agent's hooks wrap every call).  Standard library only; torch objects are only touched.
Written into ``settings.json`` as ``evidence`` (and ``dataloader.batch_fingerprints`` /
``dataloader.sharded_by``); ``ddpdoctor/bundle/evidence.py`` turns them into facts.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections.abc import Mapping

FINGERPRINT_BATCHES = 3          # batches fingerprinted per DataLoader, from its first
FINGERPRINT_BYTES = 4096         # bytes of each tensor/array hashed (plus its shape and dtype)
FINGERPRINT_MAX_ITEMS = 64       # leaves of one batch hashed (a batch is usually a few tensors)
LOAD_SAMPLE_S = 0.1              # /proc/loadavg read this often during the window


# ------------------------------------------------------------------ host contention probes

def _read(path: str) -> str | None:
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
        text = _read(path)
        return text.rsplit(")", 1)[1].split()[0] if text and ")" in text else None

    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    n, kids = -1, set()
    for tid in tids:
        n += state(f"/proc/self/task/{tid}/stat") == "R"
        text = _read(f"/proc/self/task/{tid}/children")
        if text:
            kids.update(text.split())
    n += sum(state(f"/proc/{pid}/stat") == "R" for pid in kids)
    return max(0, n)


def _usage(who) -> dict | None:
    try:
        import resource

        ru = resource.getrusage(who)
        return {"cpu_s": ru.ru_utime + ru.ru_stime, "utime_s": ru.ru_utime, "stime_s": ru.ru_stime,
                "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw}
    except (ImportError, AttributeError, ValueError, OSError):
        return None


def _thread_usage() -> dict | None:
    try:
        import resource

        return _usage(resource.RUSAGE_THREAD)     # Linux only (AttributeError elsewhere)
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
            text = _read(f"/proc/self/task/{tid}/children")
            if text:
                pids.update(text.split())
    except OSError:
        return None
    hz = _clock_ticks()
    for pid in pids:
        text = _read(f"/proc/{pid}/stat")
        if not text or ")" not in text:
            continue
        fields = text.rsplit(")", 1)[1].split()
        try:
            total += (int(fields[11]) + int(fields[12])) / hz     # utime, stime (fields 14, 15)
        except (IndexError, ValueError):
            continue
    return total


def contention_snapshot() -> dict:
    """One reading of every counter; taken in the training thread at window start and stop."""
    return {"time": time.time(), "thread_ident": threading.get_ident(), "thread": _thread_usage(),
            "process": _usage(0), "children_cpu_s": _children_cpu_s(),   # 0 = RUSAGE_SELF
            "proc_stat": proc_stat_times(_read("/proc/stat"))}


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
        out["host"] = {"total_s": round(s1["total_s"] - s0["total_s"], 6),
                       "idle_s": round(s1["idle_s"] - s0["idle_s"], 6),
                       "steal_s": (round(s1["steal_s"] - s0["steal_s"], 6)
                                   if s0["steal_s"] is not None and s1["steal_s"] is not None else None)}
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


# ------------------------------------------------------------------ batch fingerprints

def _hash_leaf(h, x) -> None:
    if x is None or isinstance(x, (bool, int, float, complex)):
        h.update(f"{type(x).__name__}:{x!r};".encode())
    elif isinstance(x, str):
        h.update(b"s:" + x.encode("utf-8", "replace")[:FINGERPRINT_BYTES] + b";")
    elif isinstance(x, (bytes, bytearray, memoryview)):
        h.update(b"b:" + bytes(x[:FINGERPRINT_BYTES]) + b";")
    elif hasattr(x, "data_ptr") and hasattr(x, "dtype") and hasattr(x, "shape"):        # a torch tensor
        h.update(f"t:{tuple(x.shape)}:{x.dtype};".encode())
        h.update(_tensor_head(x))
    elif hasattr(x, "tobytes") and hasattr(x, "dtype") and hasattr(x, "shape"):         # a numpy array
        h.update(f"a:{tuple(x.shape)}:{x.dtype};".encode())
        flat = x.reshape(-1)
        h.update(flat[: max(1, FINGERPRINT_BYTES // max(1, x.itemsize))].tobytes())
    else:
        h.update(f"o:{type(x).__module__}.{type(x).__qualname__};".encode())


def _tensor_head(t) -> bytes:
    """The first FINGERPRINT_BYTES bytes of a tensor's values (a small copy; no numpy needed)."""
    import ctypes

    flat = t.detach().reshape(-1)
    n = max(1, FINGERPRINT_BYTES // max(1, flat.element_size()))
    head = flat[:n]
    if head.device.type != "cpu":
        head = head.cpu()
    head = head.contiguous()
    nbytes = head.numel() * head.element_size()
    return ctypes.string_at(head.data_ptr(), nbytes) if nbytes else b""


def batch_fingerprint(batch) -> str:
    """A content hash of one batch: nested tuples/lists/dicts walked in order (dict keys
    sorted), each tensor by shape, dtype and its first bytes; scalars and strings by value."""
    h = hashlib.blake2b(digest_size=12)
    stack = [batch]
    leaves = 0
    while stack and leaves < FINGERPRINT_MAX_ITEMS:
        x = stack.pop()
        if isinstance(x, Mapping):
            keys = sorted(x.keys(), key=str)
            h.update(f"d{len(keys)}:".encode())
            for k in reversed(keys):
                stack.append(x[k])
                stack.append(str(k))
        elif isinstance(x, (list, tuple)):
            h.update(f"l{len(x)}:".encode())
            stack.extend(reversed(x))
        else:
            _hash_leaf(h, x)
            leaves += 1
    return h.hexdigest()


def _class_names(obj) -> list[str]:
    try:
        return [c.__name__ for c in type(obj).__mro__]
    except Exception:  # noqa: BLE001
        return []


# ------------------------------------------------------------------ the sampler's rate

# The stack sampler aims at SAMPLES_PER_WINDOW samples over the profiled window, from the median
# step time seen before it: a 5-step window of 20 ms steps gets ~50 samples at 2 ms, not ~10 at
# 10 ms, so extra work of a few ms per step on one rank clears extra_work_min_samples.  Never faster
# than every MIN_INTERVAL_S (at 500 Hz the window's steps ran 5-12 % slower, measured with
# benchmarks/sampler_overhead.py, see docs/BUNDLE.md; only inside the window, and only for steps
# under ~20 ms) nor slower than every MAX_INTERVAL_S.  DDPDOCTOR_SAMPLE_HZ fixes the rate (0: no sampler).
SAMPLES_PER_WINDOW = 50
MIN_INTERVAL_S = 0.002
MAX_INTERVAL_S = 0.010


def sample_interval_s(hz_setting: str | None, typical_step_s: float | None, steps: int | None) -> float | None:
    """Seconds between stack samples for this window, or None when the sampler is off."""
    if hz_setting not in (None, ""):
        hz = _float(hz_setting, 100.0)
        return 1.0 / hz if hz > 0 else None
    if not typical_step_s or not steps or typical_step_s <= 0 or steps <= 0:
        return MAX_INTERVAL_S
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, typical_step_s * steps / SAMPLES_PER_WINDOW))


# ------------------------------------------------------------------ the rank's evidence

class Evidence:
    """Owned by the agent.  The hooks call ``loader_created`` / ``batch_returned`` /
    ``forward_entered``; the profiler window calls ``window_start`` / ``window_stop`` from the
    training thread; ``record()`` is what settings.json holds under ``evidence``."""

    def __init__(self, env, stacks_module, gil_module=None, work_dir: str | None = None, step_of=None, jobtree=None):
        self.env = env
        self._jobtree, self._job = jobtree, None     # agent_jobtree.py: the job's whole process tree
        self._stacks = stacks_module
        self._gil = gil_module             # agent_gil.py: GC pauses and the sampler's gaps (None: not recorded)
        self._work_dir = work_dir          # where the native stack dumps are written during the window
        self._step_of = step_of or (lambda: 0)
        self._gc = self._gaps = self._native = None
        self.phase = None                  # "loader" | "input" | "step" | "capture": read by the sampler thread
        self.window_forwards = 0
        self.in_window = False
        self._start = None
        self._loads: list[int] = []
        self._own_loads: list[int] = []    # the job's own runnable tasks at each /proc/loadavg reading
        self._torch_threads = None
        self._sampler = None
        self._stop_event = None
        self._thread = None
        self._record: dict | None = None
        self.errors: list[str] = []

    # ---- hooks
    def loader_created(self, info: dict, loader) -> None:
        info.setdefault("batch_fingerprints", [])      # sharded_by: agent_settings records it

    def loader_entered(self) -> None:
        self.phase = "loader"

    def batch_returned(self, info: dict | None, batch) -> None:
        self.phase = "input"
        if info is not None:
            fps = info.setdefault("batch_fingerprints", [])
            if len(fps) < FINGERPRINT_BATCHES:
                try:
                    fps.append(batch_fingerprint(batch))
                except Exception:  # noqa: BLE001
                    fps.append(None)          # unhashable batch: recorded once, the rank is left out of the comparison

    def own_work_begins(self):
        """ddpdoctor's own work on the training thread at a step boundary (the window's start: the sampler
        thread's start, the early copy of the settings): its samples are set aside as "capture", not
        charged to the script's line that stepped the optimizer. Returns the phase to restore."""
        prev, self.phase = self.phase, "capture"
        return prev

    def own_work_ends(self, prev) -> None:
        if self.phase == "capture":
            self.phase = prev

    def forward_entered(self) -> None:
        self.phase = "step"
        if self.in_window:
            self.window_forwards += 1

    # ---- window
    def window_start(self, torch, step: int, typical_step_s: float | None = None, steps: int | None = None) -> None:
        try:
            self._torch_threads = int(torch.get_num_threads()) if torch is not None else None
        except Exception:  # noqa: BLE001
            self._torch_threads = None
        self.window_forwards = 0
        self._loads = []
        self._own_loads = []
        self._start = contention_snapshot()
        self._job = self._jobtree.JobSampler.for_rank(self.env) if self._jobtree is not None else None
        self._start_step = step
        interval = sample_interval_s(self.env.get("DDPDOCTOR_SAMPLE_HZ"), typical_step_s, steps)
        if interval is not None:
            script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c") else None
            script_dir = os.path.dirname(os.path.abspath(script)) if script else os.getcwd()
            self._sampler = self._stacks.StackSampler(threading.get_ident(), interval, script_dir,
                                                      agent_dir=os.path.dirname(os.path.abspath(__file__)),
                                                      phase_of=lambda: self.phase)
        self._start_gil_evidence()
        self._stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-evidence", daemon=True)
        self.in_window = True
        self._thread.start()

    def _run(self) -> None:
        """The window's sampling thread: stacks at the sampler's rate, /proc/loadavg every LOAD_SAMPLE_S."""
        sampler, stop = self._sampler, self._stop_event
        interval = sampler.interval if sampler is not None else LOAD_SAMPLE_S
        next_load = time.monotonic()
        deadline = time.monotonic()
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_load:
                    n = runnable_tasks(_read("/proc/loadavg"))
                    if n is not None:
                        self._loads.append(n - 1)        # minus this thread, which is running to read it
                        if self._job is not None:
                            self._job.sample(n)
                        own = own_runnable_threads() if self._job is None else None
                        if own is not None:
                            self._own_loads.append(own)
                    next_load = now + LOAD_SAMPLE_S
                if sampler is not None:
                    t0 = time.perf_counter()
                    sampler.sample()
                    sampler.busy_s += time.perf_counter() - t0
                    if self._gaps is not None:
                        self._gaps.seen(t0, sampler.last, self._native.offset() if self._native else 0)
                        if self._native is not None:
                            self._native.arm(t0)     # the C watchdog dumps the stacks if the sampler starves
                deadline = max(deadline + interval, time.monotonic())
                stop.wait(max(0.0, deadline - time.monotonic()))
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"sampler: {type(exc).__name__}: {exc}")
        if sampler is not None:
            sampler.cpu_s = time.thread_time()

    def window_stop(self, recorded_steps: int) -> None:
        if not self.in_window:
            return
        self.in_window = False
        self._stop_event.set()
        self._thread.join(timeout=2.0)
        stop = contention_snapshot()
        rec = {"schema": 1, "window_first_step": self._start_step, "window_steps": recorded_steps,
               "contention": contention_record(self._start, stop, self._loads, self._torch_threads, self.env)}
        rec["contention"]["own_runnable_samples"] = list(self._own_loads)
        if self._job is not None:
            rec["contention"]["job"] = self._job.record()
        wall = rec["contention"]["wall_s"]
        self._stop_gil_evidence(rec, recorded_steps)
        starved = _starved_s(rec, recorded_steps)        # the time in the sampler's gaps: no sample stands for it
        if self._sampler is not None:
            rec["stacks"] = self._sampler.summary(wall, recorded_steps, self.window_forwards, starved)
        else:
            rec["stacks"] = {"sampled": False, "reason": "DDPDOCTOR_SAMPLE_HZ=0"}
        if self.errors:
            rec["errors"] = self.errors[:5]
        self._record = rec

    # ---- GC pauses and the time the sampler cannot see (agent_gil.py)
    def _start_gil_evidence(self) -> None:
        gil = self._gil
        if gil is None:
            return
        try:
            self._gc = gil.GcRecorder(self._step_of)
            self._gc.start()
            if self._sampler is not None:
                self._gaps = gil.Gaps(self._sampler.interval)
                if self.env.get("DDPDOCTOR_NATIVE_SAMPLER") == "1" and self._work_dir:
                    self._native = gil.NativeDumps(os.path.join(self._work_dir, "native_stacks.tmp"),
                                                   self._gaps.threshold)
                    self._native.start()
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"gil evidence: {type(exc).__name__}: {exc}")

    def _stop_gil_evidence(self, rec: dict, steps: int) -> None:
        gil = self._gil
        if gil is None:
            return
        try:
            if self._gc is not None:
                self._gc.stop()
                rec["gc"] = self._gc.record(steps)
            native = self._native
            text = native.stop() if native is not None else None
            if native is None:
                info = {"sampler": None, "reason": "no stack sampler in this window" if self._sampler is None
                        else "off (DDPDOCTOR_NATIVE_SAMPLER=1 turns it on)"}
            elif native.error:
                info = {"sampler": None, "reason": native.error}
            else:
                info = {"sampler": "faulthandler.dump_traceback_later", "timeout_s": native.timeout,
                        "arms": native.arms, "dumps": text.count("Timeout ("), "cancelled_for_forks": native.pauses}
            if self._gaps is not None:
                rec["gil"] = gil.summarize(self._gaps, self._gc, text, native is not None and not native.error,
                                           self._sampler, self._sampler.thread_id, steps, info)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"gil evidence: {type(exc).__name__}: {exc}")
        finally:
            self._gc = self._gaps = self._native = None

    def record(self) -> dict | None:
        return self._record


def _starved_s(rec: dict, steps: int) -> float:
    per_step = (rec.get("gil") or {}).get("starved_ms_per_step") or {}
    return sum(v for v in per_step.values() if isinstance(v, (int, float))) * max(steps, 0) / 1000.0


def _float(v, default: float) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return default
