"""Part of the capture agent (standard library only): ``ddpdoctor run --watch`` / ``DDPDOCTOR_WATCH=1`` in a
rank (issue 38).  No window at start-up: the rank keeps a cheap record of every step and watches it.

- **Per step** (``boundary``, called by the agent after each step boundary): wall time, DataLoader wait, the
  main thread's CPU time and its run-queue wait (schedstat) go into a buffer appended to
  ``ranks/rank<R>/watch-steps.jsonl`` every ``FLUSH_EVERY`` steps; the step time feeds the detector
  (``watch_detect.StepDetector``).  No file operation on the step path otherwise.
- **Contention is not an incident.** When the slow steps' extra time is mostly run-queue wait (the thread was
  runnable, other processes had the cores) the host changed, not the job: it is noted (``contention`` in the
  state, a ``watch_contention`` event) and the baseline learned again.
- **Agreement.** A rank whose detector raises an alarm creates ``DIR/watch/trigger-NNN.json`` (an exclusive
  link: the first rank wins) naming the step S = its step + a lead of about ``LEAD_S`` of steps (at least 3) at
  which every rank starts recording, and for how many steps.  Every rank's watcher thread looks for the next
  trigger file twice a second (one ``stat``): no collective, no store, no file operation on the step path.
- **Hang.** A thread checks twice a second how long ago the last step ended; past ``hang fraction`` (0.25)
  of the process group's timeout (at least 10 typical steps) it creates a ``hang`` trigger, and every rank's
  thread dumps its stacks into the incident (``watch_incident.dump_hang``) while the job still lives.
- **Bounds.** At most ``DDPDOCTOR_WATCH_MAX`` incidents (5); after one the detector learns its baseline again
  after a cool-down (``COOLDOWN`` steps), so a change it reported is the new normal.
"""

from __future__ import annotations

import math
import os
import threading
import time

from . import watch_detect as _detect
from . import watch_incident as _files
from . import watch_stall as _stall
from . import watch_whose as _whose

FLUSH_EVERY = 50
COOLDOWN = 30  # steps ignored after an incident's recording, before the baseline is learned again
LEAD_S = 1.2  # more than the watcher's poll (0.5 s) + a shared filesystem's attribute cache: every rank sees it first
MIN_LEAD, MAX_LEAD = 3, 5000
GRACE_S = 1.0  # an alarm of a rank that only waits longer is held this long: a peer may find contention
SCHEDSTAT = "/proc/thread-self/schedstat"
RECORD_S = 0.5  # an incident records at least this long ...
MIN_RECORD, MAX_RECORD = 5, 100  # ... in this many steps


def _env_num(env, name, default, cast=float):
    try:
        return cast(env.get(name, default))
    except (TypeError, ValueError):
        return default


class Watch:
    def __init__(self, agent):
        self.agent = agent
        env = agent.env
        self.bundle = agent.bundle
        self.max_incidents = _env_num(env, "DDPDOCTOR_WATCH_MAX", 5, int)
        self.detector = _detect.StepDetector(
            _detect.DetectorConfig(warmup=_env_num(env, "DDPDOCTOR_WATCH_WARMUP", 20, int))
        )
        self.lock = threading.Lock()
        self.next_n = 1  # the next incident number to look for
        self.pending: dict | None = None  # the trigger this rank records next (or now)
        self.recording: dict | None = None
        self.filed: list[int] = []
        self.buffer: list[str] = []
        self.loader_wait = 0.0
        self._loader_t0 = None
        self._cpu0 = time.thread_time()
        self.overhead_s = 0.0
        self.step_sum_s = 0.0
        self.steps_seen = 0
        self.steps_path = os.path.join(agent.dir, _files.STEPS_FILE)
        self._schedstat = _open_schedstat()  # this (the main) thread's, kept open: one pread per step
        self._runq0 = _runqueue_s(self._schedstat)
        self.recent: list[tuple[float, ...]] = []  # (wall, run-queue wait, CPU, loader wait) of the last steps
        self.held: tuple | None = None  # (alarm, until) an alarm waiting out GRACE_S
        self.contention: list[dict] = []  # slowdowns the host's other processes explained (no incident)
        self.stalls = _stall.Stalls(self)  # hangs and failures: the watcher thread

    # ---------------------------------------------------------------- install
    def start(self) -> None:
        self.agent.window.manual = True  # no window at start-up: only incidents record
        threading.Thread(target=self.stalls.run, name="ddpdoctor-watch", daemon=True).start()

    # ---------------------------------------------------------------- the loader's wait (agent hooks)
    def loader_entered(self) -> None:
        self._loader_t0 = time.perf_counter()

    def loader_returned(self) -> None:
        if self._loader_t0 is not None:
            self.loader_wait += time.perf_counter() - self._loader_t0
            self._loader_t0 = None

    # ---------------------------------------------------------------- each step
    def boundary(self, b) -> None:
        try:
            self._boundary(b)
        except Exception as exc:  # a watch problem never reaches the user's program
            self.agent.internal_error("watch", exc)

    def _boundary(self, b) -> None:
        t0 = time.perf_counter()
        step, dur = b.step, b.duration
        cpu, runq = time.thread_time(), _runqueue_s(self._schedstat)
        queued = runq - self._runq0 if runq is not None and self._runq0 is not None else 0.0
        if dur is not None:
            self.buffer.append(
                f'{{"step":{step},"wall_s":{dur:.6f},"loader_s":{self.loader_wait:.6f},'
                f'"cpu_s":{cpu - self._cpu0:.6f},"runq_s":{queued:.6f}}}'
            )
            self.recent.append((dur, queued, cpu - self._cpu0, self.loader_wait))
            del self.recent[: -(self.detector.cfg.learn + max(self.detector.window_n, self.detector.cfg.window))]
        self._cpu0, self._runq0, self.loader_wait = cpu, runq, 0.0
        self.steps_seen = step + 1
        if len(self.buffer) >= FLUSH_EVERY:
            self._flush()
        if self.stalls.pg_timeout_s is None and step >= 1:
            self.stalls.pg_timeout_s = _stall.pg_timeout(self.agent.torch)
        if self.recording is not None:
            t0 += self._timed(self._recording_step)  # an incident's own recording is not the watch's overhead
        else:  # (the watcher thread looks for other ranks' triggers: no file operation here)
            if self.pending is not None:
                if self.agent.window.steps >= self.pending["step"] and self.pending["kind"] != "hang":
                    t0 += self._timed(self._start_recording)
            elif dur is not None and len(self.filed) < self.max_incidents and self.next_n <= self.max_incidents:
                self._detect(step, dur)
        if dur is not None:
            self.step_sum_s += dur
        self.overhead_s += time.perf_counter() - t0

    def _detect(self, step: int, dur: float) -> None:
        if self.held is not None:  # waiting out the grace: a peer's contention note explains it, or it is raised
            alarm, until = self.held
            if time.time() < until:
                return
            self.held = None
            if _whose.peer_contention(self, until - GRACE_S):
                _whose.note_contention(self, alarm, None, "a peer's run-queue wait (contention.json)")
            else:
                self._raise(alarm)
            return
        alarm = self.detector.add(step, dur)
        if alarm is None:
            return
        verdict = _whose.whose_time(self, alarm)
        if verdict == "own":
            self._raise(alarm)
        elif verdict == "waits":
            self.held = (alarm, time.time() + GRACE_S)

    @staticmethod
    def _timed(action) -> float:
        t = time.perf_counter()
        action()
        return time.perf_counter() - t

    def check_trigger(self) -> None:
        if self.pending is not None:
            return
        with self.lock:
            t = (
                _files.read_trigger(self.bundle, self.next_n)
                if os.path.exists(_files.trigger_path(self.bundle, self.next_n))
                else None
            )
            if t is not None:
                self.pending = t
                self.next_n += 1
        if t is not None:
            self.agent.event("watch_trigger", n=t["n"], incident=t["kind"], step=t["step"], raised_here=False)

    def _raise(self, alarm) -> None:
        typical = alarm.baseline.median_s
        now_s = max(alarm.median_s, typical, 1e-4)  # the lead and the window at the steps' pace now
        lead = min(MAX_LEAD, max(MIN_LEAD, math.ceil(LEAD_S / now_s)))
        steps = min(MAX_RECORD, max(MIN_RECORD, math.ceil(RECORD_S / now_s)))
        if alarm.how == "pauses":
            what = f"a mean of {alarm.median_s * 1000:.1f} ms over its last {alarm.steps} steps (the longest left out)"
            base = f"a baseline mean of {alarm.baseline.mean_s * 1000:.1f} ms: pauses"
        else:
            what = f"a median of {alarm.median_s * 1000:.1f} ms over its last {alarm.steps} steps"
            base = f"a baseline of {typical * 1000:.1f} ms, {alarm.ratio:.2f}x"
        why = f"rank {self.agent.rank}'s steps took {what} against {base}"
        trigger = {
            "n": self.next_n,
            "kind": "slowdown",
            "step": self.agent.window.steps + lead,
            "steps": steps,
            "rank": self.agent.rank,
            "at_step": self.agent.window.steps,
            "onset_step": alarm.onset,
            "time": time.time(),
            "why": why,
            "baseline": alarm.baseline.as_dict(),
        }
        self.claim(trigger)

    def claim(self, trigger: dict) -> None:
        with self.lock:
            if self.pending is not None or trigger["n"] != self.next_n:
                return
            try:
                mine = _files.create_trigger(self.bundle, trigger)
            except OSError as exc:
                self.agent.internal_error("watch trigger", exc)
                return
            t = trigger if mine else _files.read_trigger(self.bundle, trigger["n"])
            if t is None:
                return
            self.pending, self.next_n = t, self.next_n + 1
        self.agent.event(
            "watch_trigger", n=t["n"], incident=t["kind"], step=t["step"], raised_here=mine, why=t.get("why")
        )

    def _start_recording(self) -> None:
        a, t = self.agent, self.pending
        self.held = None
        self.pending, self.recording = None, t
        a.window.window_done = False
        a.window.recorded = 0
        if not a.profiler.mark_window_start():
            self.agent.event("watch_incident_skipped", n=t["n"], step=a.window.steps, why="the profiler did not start")
            self._done_recording()
        else:
            a.event("watch_recording", n=t["n"], step=a.window.steps, steps=t["steps"])

    def _recording_step(self) -> None:
        a, t = self.agent, self.recording
        if a.window.recorded < t["steps"]:
            return
        a.profiler.mark_window_end()
        try:
            _files.file_window(a, t)
            self.filed.append(t["n"])
        except OSError as exc:
            a.internal_error("watch incident", exc)
        self._done_recording()

    def _done_recording(self) -> None:
        self.recording, self.held = None, None  # an alarm held before this incident is this incident
        self.detector.relearn(skip=COOLDOWN)
        self.write_state()

    # ---------------------------------------------------------------- records
    def _flush(self) -> None:
        lines, self.buffer = self.buffer, []
        if not lines:
            return
        try:
            with open(self.steps_path, "a", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")
        except OSError as exc:  # a full disk: the job goes on, the record stops
            self.agent.internal_error("watch steps", exc)

    def write_state(self) -> None:
        d = self.detector
        steps = max(1, self.steps_seen)
        state = {
            "rank": self.agent.rank,
            "world_size": self.agent.world_size,
            "steps": self.steps_seen,
            "filed": self.filed,
            "baseline": d.baseline.as_dict() if d.baseline else None,
            "pg_timeout_s": self.stalls.pg_timeout_s,
            "hang_after_s": self.stalls.hang_after_s(),
            "overhead_per_step_s": round(self.overhead_s / steps, 7),
            "contention": self.contention,
            "overhead_share": round(self.overhead_s / self.step_sum_s, 6) if self.step_sum_s > 0 else None,
        }
        try:
            _files.write_state(self.agent, state)
        except OSError as exc:
            self.agent.internal_error("watch state", exc)

    def finish(self) -> None:
        """The rank ends: the last steps, its state, and the run's watch.json as far as it is known."""
        try:
            self._finish()
        except Exception as exc:
            self.agent.internal_error("watch at exit", exc)

    def _finish(self) -> None:
        a = self.agent
        if self.recording is not None and a.window.profiling:  # cut short by the job's end: file what there is
            a.profiler.mark_window_end()
            try:
                _files.file_window(a, self.recording)
                self.filed.append(self.recording["n"])
            except OSError as exc:
                a.internal_error("watch incident", exc)
            self.recording = None
        if a.life.exit_code not in (0, None) and str(a.life.exit_reason or "").startswith("uncaught"):
            self.stalls.failed(a.life.exit_reason)
        self._flush()
        self.write_state()
        try:
            _files.write_summary(self.bundle)
        except OSError as exc:
            a.internal_error("watch.json", exc)


def _open_schedstat() -> int | None:
    try:
        return os.open(SCHEDSTAT, os.O_RDONLY)
    except OSError:
        return None


def _runqueue_s(fd: int | None) -> float | None:
    """Seconds the thread whose schedstat ``fd`` is has been runnable but waiting for a CPU (Linux), or None."""
    if fd is None:
        return None
    try:
        return int(os.pread(fd, 128, 0).split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None
