"""Part of the capture agent: evidence recorded over the profiled
window, for the verdict's "is this the workload or the machine?" questions.

- host contention (``contention.py``): the training thread's and the process's CPU time and context switches
  (getrusage), the host's CPU time split (/proc/stat), runnable tasks sampled in the window
  (/proc/loadavg), usable CPUs (sched_getaffinity), torch's intra-op threads;
- where the training thread's Python time goes (``stacks.py``: a sampler thread that
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

from .contention import contention_record, contention_snapshot, own_runnable_threads, read_proc_text, runnable_tasks

FINGERPRINT_BATCHES = 3  # batches fingerprinted per DataLoader, from its first
FINGERPRINT_BYTES = 4096  # bytes of each tensor/array hashed (plus its shape and dtype)
FINGERPRINT_MAX_ITEMS = 64  # leaves of one batch hashed (a batch is usually a few tensors)
LOAD_SAMPLE_S = 0.1  # /proc/loadavg read this often during the window


# ------------------------------------------------------------------ batch fingerprints


def _hash_leaf(h, x) -> None:
    if x is None or isinstance(x, (bool, int, float, complex)):
        h.update(f"{type(x).__name__}:{x!r};".encode())
    elif isinstance(x, str):
        h.update(b"s:" + x.encode("utf-8", "replace")[:FINGERPRINT_BYTES] + b";")
    elif isinstance(x, (bytes, bytearray, memoryview)):
        h.update(b"b:" + bytes(x[:FINGERPRINT_BYTES]) + b";")
    elif hasattr(x, "data_ptr") and hasattr(x, "dtype") and hasattr(x, "shape"):  # a torch tensor
        h.update(f"t:{tuple(x.shape)}:{x.dtype};".encode())
        h.update(_tensor_head(x))
    elif hasattr(x, "tobytes") and hasattr(x, "dtype") and hasattr(x, "shape"):  # a numpy array
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
    except Exception:
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
        self._jobtree, self._job = jobtree, None  # jobtree.py: the job's whole process tree
        self._stacks = stacks_module
        self._gil = gil_module  # gil.py: GC pauses and the sampler's gaps (None: not recorded)
        self._work_dir = work_dir  # where the native stack dumps are written during the window
        self._step_of = step_of or (lambda: 0)
        self._gc = self._gaps = self._native = None
        self.phase = None  # "loader" | "input" | "step" | "capture": read by the sampler thread
        self.window_forwards = 0
        self.in_window = False
        self._start = None
        self._loads: list[int] = []
        self._own_loads: list[int] = []  # the job's own runnable tasks at each /proc/loadavg reading
        self._torch_threads = None
        self._sampler = None
        self._stop_event = None
        self._thread = None
        self._record: dict | None = None
        self.errors: list[str] = []

    # ---- hooks
    def loader_created(self, info: dict, loader) -> None:
        info.setdefault("batch_fingerprints", [])  # sharded_by: settings.py records it

    def loader_entered(self) -> None:
        self.phase = "loader"

    def batch_returned(self, info: dict | None, batch) -> None:
        self.phase = "input"
        if info is not None:
            fps = info.setdefault("batch_fingerprints", [])
            if len(fps) < FINGERPRINT_BATCHES:
                try:
                    fps.append(batch_fingerprint(batch))
                except Exception:
                    fps.append(None)  # unhashable batch: recorded once, the rank is left out of the comparison

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
        except Exception:
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
            self._sampler = self._stacks.StackSampler(
                threading.get_ident(),
                interval,
                script_dir,
                agent_dir=os.path.dirname(os.path.abspath(__file__)),
                phase_of=lambda: self.phase,
            )
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
                if sampler is not None:  # first, before any read that releases the GIL (see gil.py)
                    t0 = time.perf_counter()
                    sampler.sample()
                    sampler.busy_s += time.perf_counter() - t0
                    if self._gaps is not None:
                        off = self._native.offset() if self._native else 0
                        self._gaps.seen(t0, sampler.last, off, sampler.last_top)
                        if self._native is not None:
                            self._native.arm(t0)  # the C watchdog dumps the stacks if the sampler starves
                now = time.monotonic()
                if now >= next_load:
                    n = runnable_tasks(read_proc_text("/proc/loadavg"))
                    if n is not None:
                        self._loads.append(n - 1)  # minus this thread, which is running to read it
                        if self._job is not None:
                            self._job.sample(n)
                        own = own_runnable_threads() if self._job is None else None
                        if own is not None:
                            self._own_loads.append(own)
                    next_load = now + LOAD_SAMPLE_S
                deadline = max(deadline + interval, time.monotonic())
                stop.wait(max(0.0, deadline - time.monotonic()))
        except Exception as exc:
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
        rec = {
            "schema": 1,
            "window_first_step": self._start_step,
            "window_steps": recorded_steps,
            "contention": contention_record(self._start, stop, self._loads, self._torch_threads, self.env),
        }
        rec["contention"]["own_runnable_samples"] = list(self._own_loads)
        if self._job is not None:
            rec["contention"]["job"] = self._job.record()
        wall = rec["contention"]["wall_s"]
        self._stop_gil_evidence(rec, recorded_steps)
        starved = _starved_s(rec, recorded_steps)  # the time in the sampler's gaps: no sample stands for it
        if self._sampler is not None:
            rec["stacks"] = self._sampler.summary(wall, recorded_steps, self.window_forwards, starved)
        else:
            rec["stacks"] = {"sampled": False, "reason": "DDPDOCTOR_SAMPLE_HZ=0"}
        if self.errors:
            rec["errors"] = self.errors[:5]
        self._record = rec

    # ---- GC pauses and the time the sampler cannot see (gil.py)
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
                    self._native = gil.NativeDumps(
                        os.path.join(self._work_dir, "native_stacks.tmp"), self._gaps.threshold
                    )
                    self._native.start()
        except Exception as exc:
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
                info = {
                    "sampler": None,
                    "reason": "no stack sampler in this window"
                    if self._sampler is None
                    else "off (DDPDOCTOR_NATIVE_SAMPLER=1 turns it on)",
                }
            elif native.error:
                info = {"sampler": None, "reason": native.error}
            else:
                info = {
                    "sampler": "faulthandler.dump_traceback_later",
                    "timeout_s": native.timeout,
                    "arms": native.arms,
                    "dumps": text.count("Timeout ("),
                    "cancelled_for_forks": native.pauses,
                }
            if self._gaps is not None:
                rec["gil"] = gil.summarize(
                    self._gaps,
                    self._gc,
                    text,
                    native is not None and not native.error,
                    self._sampler,
                    self._sampler.thread_id,
                    steps,
                    info,
                )
        except Exception as exc:
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
