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

FLUSH_EVERY = 50
COOLDOWN = 30  # steps ignored after an incident's recording, before the baseline is learned again
LEAD_S = 1.2  # more than the watcher's poll (0.5 s) + a shared filesystem's attribute cache: every rank sees it first
MIN_LEAD, MAX_LEAD = 3, 5000
CONTENTION_SHARE = 0.5  # a rise in step time at least half explained by run-queue wait: the host, not the job
SCHEDSTAT = "/proc/thread-self/schedstat"
RECORD_S = 0.5  # an incident records at least this long ...
MIN_RECORD, MAX_RECORD = 5, 100  # ... in this many steps
HANG_FRACTION = 0.25
HANG_FLOOR_S = 2.0
POLL_S = 0.5


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
        self.hang_fraction = _env_num(env, "DDPDOCTOR_WATCH_HANG_FRACTION", HANG_FRACTION)
        self.hang_s_override = _env_num(env, "DDPDOCTOR_WATCH_HANG_S", 0.0)
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
        self.pg_timeout_s: float | None = None
        self.hang_filed_at: int | None = None  # the step a hang incident was filed at: none again until a step
        self.steps_path = os.path.join(agent.dir, _files.STEPS_FILE)
        self._runq0 = _runqueue_s()
        self.recent: list[tuple[float, float]] = []  # (wall, run-queue wait) of the last steps
        self.contention: list[dict] = []  # slowdowns the host's other processes explained (no incident)

    # ---------------------------------------------------------------- install
    def start(self) -> None:
        self.agent.window.manual = True  # no window at start-up: only incidents record
        threading.Thread(target=self._watchdog, name="ddpdoctor-watch", daemon=True).start()

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
        cpu, runq = time.thread_time(), _runqueue_s()
        queued = runq - self._runq0 if runq is not None and self._runq0 is not None else 0.0
        if dur is not None:
            self.buffer.append(
                f'{{"step":{step},"wall_s":{dur:.6f},"loader_s":{self.loader_wait:.6f},'
                f'"cpu_s":{cpu - self._cpu0:.6f},"runq_s":{queued:.6f}}}'
            )
            self.recent.append((dur, queued))
            del self.recent[: -(self.detector.cfg.learn + max(self.detector.window_n, self.detector.cfg.window))]
        self._cpu0, self._runq0, self.loader_wait = cpu, runq, 0.0
        self.steps_seen = step + 1
        if len(self.buffer) >= FLUSH_EVERY:
            self._flush()
        if self.pg_timeout_s is None and step >= 1:
            self.pg_timeout_s = self._pg_timeout()
        if self.recording is not None:
            t0 += self._timed(self._recording_step)  # an incident's own recording is not the watch's overhead
        else:  # (the watcher thread looks for other ranks' triggers: no file operation here)
            if self.pending is not None:
                if self.agent.window.steps >= self.pending["step"] and self.pending["kind"] != "hang":
                    t0 += self._timed(self._start_recording)
            elif dur is not None and len(self.filed) < self.max_incidents and self.next_n <= self.max_incidents:
                alarm = self.detector.add(step, dur)
                if alarm is not None and not self._host_explains(alarm):
                    self._raise(alarm)
        if dur is not None:
            self.step_sum_s += dur
        self.overhead_s += time.perf_counter() - t0

    def _host_explains(self, alarm) -> bool:
        """The slow steps' extra time is mostly run-queue wait (runnable, no CPU free: other processes took the
        cores): the host changed, not the job.  Said in the state and the events, the baseline learned again."""
        n = self.detector.window_n
        before, slow = self.recent[:-n], self.recent[-n:]
        if not before or not slow:
            return False
        extra_wall = alarm.median_s - alarm.baseline.median_s
        extra_queue = _median([q for _w, q in slow]) - _median([q for _w, q in before])
        if extra_wall <= 0 or extra_queue < CONTENTION_SHARE * extra_wall:
            return False
        episode = {
            "step": alarm.step,
            "ratio": round(alarm.ratio, 3),
            "extra_ms": round(extra_wall * 1000, 2),
            "run_queue_extra_ms": round(extra_queue * 1000, 2),
        }
        self.contention.append(episode)
        del self.contention[:-20]
        self.agent.event("watch_contention", **episode)
        self.detector.relearn()
        return True

    @staticmethod
    def _timed(action) -> float:
        t = time.perf_counter()
        action()
        return time.perf_counter() - t

    def _check_trigger(self) -> None:
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

    def _raise(self, alarm) -> None:
        typical = alarm.baseline.median_s
        lead = min(MAX_LEAD, max(MIN_LEAD, math.ceil(LEAD_S / max(typical, 1e-4))))
        steps = min(MAX_RECORD, max(MIN_RECORD, math.ceil(RECORD_S / max(alarm.median_s, 1e-4))))
        why = (
            f"rank {self.agent.rank}'s steps took {alarm.median_s * 1000:.1f} ms (median of the slow ones in its "
            f"last {self.detector.window_n}) against a baseline of {typical * 1000:.1f} ms, {alarm.ratio:.2f}x"
        )
        trigger = {
            "n": self.next_n,
            "kind": "slowdown",
            "step": self.agent.window.steps + lead,
            "steps": steps,
            "rank": self.agent.rank,
            "at_step": self.agent.window.steps,
            "time": time.time(),
            "why": why,
            "baseline": alarm.baseline.as_dict(),
        }
        self._claim(trigger)

    def _claim(self, trigger: dict) -> None:
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
        self.recording = None
        self.detector.relearn(skip=COOLDOWN)
        self.write_state()

    # ---------------------------------------------------------------- hangs (a thread)
    def _pg_timeout(self) -> float | None:
        try:
            torch = self.agent.torch
            pg = torch.distributed.distributed_c10d._get_default_group()
            return pg._get_backend(torch.device("cpu")).options._timeout.total_seconds()
        except Exception:
            return None

    def hang_after_s(self) -> float | None:
        if self.hang_s_override > 0:
            return self.hang_s_override
        if self.pg_timeout_s is None:
            return None
        base = self.detector.baseline.median_s if self.detector.baseline else 0.0
        return max(self.hang_fraction * self.pg_timeout_s, 10 * base, HANG_FLOOR_S)

    def _watchdog(self) -> None:
        a = self.agent
        while not a.finalized:
            time.sleep(POLL_S)
            try:
                self._watch_once(time.time())
            except Exception as exc:  # never takes the rank down
                a.internal_error("watch thread", exc)
                return

    def _watch_once(self, now: float) -> None:
        a = self.agent
        self._check_trigger()
        t = self.pending
        if t is not None and t["kind"] == "hang" and t["n"] not in self.filed:
            _files.dump_hang(a, t)
            self.filed.append(t["n"])
            self.hang_filed_at = a.window.steps
            self.pending = None
            self.write_state()
            return
        limit = self.hang_after_s()
        if (
            limit is None
            or t is not None
            or self.recording is not None
            or a.window.steps <= self.detector.cfg.warmup
            or self.next_n > self.max_incidents
            or self.hang_filed_at == a.window.steps
        ):
            return
        idle = now - a.window.last_step_time
        if idle > limit:
            self._claim(
                {
                    "n": self.next_n,
                    "kind": "hang",
                    "step": a.window.steps,
                    "steps": 0,
                    "rank": a.rank,
                    "time": now,
                    "why": f"no step on rank {a.rank} for {idle:.1f} s (the process group's timeout is "
                    f"{self.pg_timeout_s:.0f} s)"
                    if self.pg_timeout_s
                    else f"no step on rank {a.rank} for {idle:.1f} s",
                }
            )

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
            "pg_timeout_s": self.pg_timeout_s,
            "hang_after_s": self.hang_after_s(),
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
        self._flush()
        self.write_state()
        try:
            _files.write_summary(self.bundle)
        except OSError as exc:
            a.internal_error("watch.json", exc)


def _runqueue_s() -> float | None:
    """Seconds this thread has been runnable but waiting for a CPU (Linux schedstat), or None."""
    try:
        with open(SCHEDSTAT, encoding="ascii") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]
