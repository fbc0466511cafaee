"""What a stuck rank was doing: Python stacks of every rank, dumped into the bundle before the job's
collective timeout fires (part of the capture agent, loaded by path like process.py; no torch import).

Each rank runs a watcher thread that samples its main thread's Python stack twice a second and keeps,
for every frame on it, when that frame was first seen (so "in evaluate() for 12 s" is measured, not
guessed).  A rank *requests* a dump when its main thread has been inside one collective for longer than
``DDPDOCTOR_HANG_S`` (default 3 s) or has made no step for ``DDPDOCTOR_HANG_NOSTEP_S`` (default 120 s) after
its first step: it creates ``ranks/hang_request.jsonl`` in the bundle.  Every rank's watcher sees the
request and writes ``ranks/rank<N>/hang_dump.jsonl``: its states since (in a collective: which; busy elsewhere:
file:line, function, since when), updated while the request stands.  For a main thread that holds the GIL
in native code (no Python thread can run), ``faulthandler`` is registered on SIGUSR2 (when the script
has no handler of its own) and the launcher sends that signal on a request: the C-level dump of all
threads lands in ``ranks/rank<N>/stacks.faulthandler``.  Works with gloo and NCCL alike (it reads Python frames,
not backend state).
"""

import faulthandler
import json
import linecache
import os
import signal
import sys
import threading
import time

HANG_SCHEMA = "ddpdoctor.hang/1"
REQUEST_FILE = "hang_request.jsonl"  # one JSON object on one line (not a trace)
POLL_S = 0.5
MAX_STATES = 20
MAX_FRAMES = 40
DEFAULT_HANG_S = 3.0  # a collective older than this while another rank is elsewhere: dump
DEFAULT_NOSTEP_S = 120.0  # no step for this long after the first one: dump
DUMP_SIGNAL = getattr(signal, "SIGUSR2", None)

# torch.distributed functions a rank waits in (the innermost such frame names the collective)
COLLECTIVES = {
    "all_reduce",
    "allreduce",
    "broadcast",
    "barrier",
    "monitored_barrier",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "gather_object",
    "scatter",
    "reduce",
    "send",
    "recv",
    "broadcast_object_list",
    "wait",
    "batch_isend_irecv",
    "init_process_group",
    "new_group",
    "_store_based_barrier",
    "destroy_process_group",
}
# waits while the job assembles: ranks start at different times, so these never request a dump
SETUP_OPS = {"init_process_group", "new_group", "_store_based_barrier", "destroy_process_group"}


def _env_float(env, name, default):
    try:
        return float(env.get(name, default))
    except (TypeError, ValueError):
        return default


def _is_torch(path: str) -> bool:
    """torch's own frames (and generated code): never "where" a rank is busy.  Other libraries count, so
    a framework's evaluation loop (transformers' ``evaluation_loop``) is named, not just the script's call."""
    p = path.replace(os.sep, "/")
    return "/torch/" in p or p.startswith("<")


def _is_stdlib(path: str) -> bool:
    p = path.replace(os.sep, "/")
    base = os.path.dirname(os.__file__).replace(os.sep, "/")
    return p.startswith(base + "/") or p.startswith("<frozen")


def _main_cpu() -> float | None:
    """CPU seconds of the main thread (Linux, macOS): busy work uses CPU, a thread blocked on a lock none."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(threading.main_thread().ident))
    except (AttributeError, OSError, TypeError, ValueError):
        return None


def describe_stack(frame):
    """[(file, line, function, key)] outermost first, and what the thread is doing:
    ("collective", op) when inside torch.distributed or DDP's backward, else ("busy", None)."""
    frames = []
    while frame is not None and len(frames) < 200:
        code = frame.f_code
        frames.append((code.co_filename, frame.f_lineno, code.co_name, (id(frame), id(code))))
        frame = frame.f_back
    frames.reverse()
    op = None
    for path, _line, func, _k in frames:
        p = path.replace(os.sep, "/")
        if "/torch/distributed/" in p and func in COLLECTIVES:
            op = func
        elif "/torch/autograd/" in p and func in ("backward", "_engine_run_backward") and op is None:
            op = "backward (DDP gradient all-reduce)"
    return frames, (("collective", op) if op else ("busy", None))


class HangWatch:
    def __init__(self, agent):
        self.agent = agent
        env = agent.env
        self.hang_s = _env_float(env, "DDPDOCTOR_HANG_S", DEFAULT_HANG_S)
        self.nostep_s = _env_float(env, "DDPDOCTOR_HANG_NOSTEP_S", DEFAULT_NOSTEP_S)
        self.ranks_dir = os.path.join(agent.bundle, "ranks")
        self.request_path = os.path.join(self.ranks_dir, REQUEST_FILE)
        self.out_path = os.path.join(agent.dir, "hang_dump.jsonl")
        self.first_seen = {}  # frame key -> time first seen on the main thread's stack
        self.coll_since = None
        self.coll_key = None  # (op, steps) of the collective coll_since belongs to
        self.episode = None  # mtime of the request file the recorded states belong to
        self.resolved = False
        self.states = []
        self.requested = False  # the time this rank requested the standing dump
        self.dumped_at = None
        self.stacks_fh = None

    # ------------------------------------------------------------------ install
    def start(self) -> None:
        self._register_faulthandler()
        threading.Thread(target=self._run, name="ddpdoctor-hang", daemon=True).start()

    def _register_faulthandler(self) -> None:
        if DUMP_SIGNAL is None or self.agent.env.get("DDPDOCTOR_HANG_SIGNAL") == "0":
            return
        try:
            if signal.getsignal(DUMP_SIGNAL) not in (signal.SIG_DFL, None):
                return  # the script handles SIGUSR2 itself: leave it alone
            self.stacks_fh = open(os.path.join(self.agent.dir, "stacks.faulthandler"), "w", encoding="utf-8")
            faulthandler.register(DUMP_SIGNAL, file=self.stacks_fh, all_threads=True, chain=False)
            self.agent.event("hang_signal_ready", pid=os.getpid(), signal=signal.Signals(DUMP_SIGNAL).name)
        except (OSError, ValueError, RuntimeError) as exc:
            self.agent.internal_error("faulthandler", exc)

    # ------------------------------------------------------------------ loop
    def _run(self) -> None:
        main_id = threading.main_thread().ident
        while not self.agent.finalized:
            time.sleep(POLL_S)
            try:
                frame = sys._current_frames().get(main_id)
                if frame is None:
                    continue
                self._sample(frame, time.time())
            except Exception as exc:  # the watcher must never take the rank down
                self.agent.internal_error("hang watch", exc)
                return

    def _sample(self, frame, now: float) -> None:
        frames, (what, op) = describe_stack(frame)
        del frame
        keys = {k for *_x, k in frames}
        self.first_seen = {k: t for k, t in self.first_seen.items() if k in keys}
        for *_x, k in frames:
            self.first_seen.setdefault(k, now)
        a = self.agent
        key = (op, a.steps) if what == "collective" else None
        if key != self.coll_key:  # another collective, or the same op of a later step
            self.coll_since, self.coll_key = (now if key else None), key
        if self.requested and a.last_step_time > self.requested:
            self._withdraw()  # this rank got past its wait with a step: no hang after all
        episode = self._request_mtime()
        if episode is None and self.episode is not None:
            self.resolved = True  # the wait ended in progress: this record explains no failure
            self._write(now)
            self.episode = None
        if episode is None and not self.requested:
            in_coll_for = now - self.coll_since if self.coll_since else 0.0
            idle = now - a.last_step_time
            if in_coll_for > self.hang_s and op not in SETUP_OPS:
                self._request(now, f"in {op} for {in_coll_for:.1f} s")
            elif a.steps > 0 and idle > self.nostep_s:
                self._request(now, f"no step for {idle:.0f} s")
            episode = self._request_mtime()
        if episode is not None:
            if episode != self.episode:  # a new request: a new record
                self.episode, self.states, self.resolved = episode, [], False
            self._record(frames, what, op, now)

    def _request_mtime(self):
        try:
            return os.stat(self.request_path).st_mtime
        except OSError:
            return None

    def _withdraw(self) -> None:
        self.requested = False
        try:
            os.unlink(self.request_path)
        except OSError:
            pass
        self.agent.event("hang_over", step=self.agent.steps)

    def _request(self, now: float, why: str) -> None:
        try:
            fd = os.open(self.request_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        except OSError as exc:
            self.agent.internal_error("hang request", exc)
            return
        with os.fdopen(fd, "w") as fh:
            json.dump({"rank": self.agent.rank, "time": now, "why": why}, fh)
        self.requested = now
        self.agent.event("hang_request", step=self.agent.steps, why=why)

    # ------------------------------------------------------------------ record
    def _where(self, frames, now):
        """The innermost frame of the user's code that has been running for the hang threshold (else
        the innermost one of the user's code): (file, line, function, seconds)."""
        user = [
            f
            for f in frames
            if not _is_torch(f[0])
            and not _is_stdlib(f[0])
            and "ddpdoctor" not in f[0].replace(os.sep, "/").rsplit("/", 1)[-1]
        ]
        if not user:
            return None
        long_ = [f for f in user if now - self.first_seen.get(f[3], now) >= self.hang_s]
        path, line, func, key = (long_ or user)[-1]
        return {"file": path, "line": line, "function": func, "since": self.first_seen.get(key, now)}

    def _record(self, frames, what, op, now) -> None:
        where = self._where(frames, now)
        sig = (what, op, where and (where["file"], where["function"]))
        last = self.states[-1] if self.states else None
        if last is not None and last["_sig"] == sig:
            last["last_seen"] = now
            cpu = _main_cpu()
            if cpu is not None and last.get("_cpu0") is not None:  # the main thread's CPU time in this state
                last["cpu_s"] = round(cpu - last["_cpu0"], 3)
            if where:
                last["where"]["line"] = where["line"]
        else:
            st = {
                "_sig": sig,
                "state": what,
                "op": op,
                "where": where,
                "first_seen": now,
                "last_seen": now,
                "since": self.coll_since if what == "collective" else (where["since"] if where else now),
                "stack": [{"file": f, "line": ln, "function": fn} for f, ln, fn, _k in frames[-MAX_FRAMES:]],
                "_cpu0": _main_cpu(),
            }
            if st["stack"]:  # the line it stands on: what it waits for (a lock, a queue) without the script
                st["stack"][-1]["code"] = linecache.getline(st["stack"][-1]["file"], st["stack"][-1]["line"]).strip()
            self.states.append(st)
            del self.states[:-MAX_STATES]
            if last is None:
                self.agent.event(
                    "hang_dump",
                    step=self.agent.steps,
                    state=what,
                    op=op,
                    where=f"{where['function']} ({os.path.basename(where['file'])}:{where['line']})" if where else None,
                )
        if self.dumped_at is None or now - self.dumped_at >= 1.0 or (last is None or last["_sig"] != sig):
            self._write(now)

    def _write(self, now) -> None:
        a = self.agent
        data = {
            "schema": HANG_SCHEMA,
            "rank": a.rank,
            "pid": os.getpid(),
            "time": now,
            "steps": a.steps,
            "last_step_time": a.last_step_time,
            "hang_s": self.hang_s,
            "resolved": self.resolved,
            "states": [{k: v for k, v in s.items() if not k.startswith("_")} for s in self.states],
        }
        tmp = self.out_path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(data, fh, default=str)
            os.replace(tmp, self.out_path)
            self.dumped_at = now
        except OSError as exc:
            self.agent.internal_error("hang dump", exc)

    def flush(self) -> None:
        """At exit: the last state, so the dump covers the rank's whole wait."""
        if self.episode is not None and self.states:
            self._write(time.time())


# ---------------------------------------------------------------------- launcher side
def signal_ranks_on_request(bundle: str, stop: threading.Event, poll_s: float = POLL_S) -> None:
    """In the launcher: when a rank requests a dump, send SIGUSR2 once to every rank of this host that
    registered faulthandler for it (their ``hang_signal_ready`` event), for a C-level dump of all threads."""
    if DUMP_SIGNAL is None:
        return
    req = os.path.join(bundle, "ranks", REQUEST_FILE)
    while not stop.wait(poll_s):
        if not os.path.exists(req):
            continue
        for pid in _ready_pids(os.path.join(bundle, "ranks")):
            try:
                os.kill(pid, DUMP_SIGNAL)
            except OSError:
                pass
        return


def _ready_pids(ranks_dir: str) -> list[int]:
    pids = []
    try:
        names = os.listdir(ranks_dir)
    except OSError:
        return pids
    for name in names:
        try:
            with open(os.path.join(ranks_dir, name, "events.jsonl"), encoding="utf-8") as fh:
                for line in fh:
                    if '"hang_signal_ready"' in line:
                        pid = json.loads(line).get("pid")
                        if isinstance(pid, int):
                            pids.append(pid)
        except (OSError, ValueError):
            continue
    return pids
