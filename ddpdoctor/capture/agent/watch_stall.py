"""Part of the capture agent (standard library only): hangs and failures under `run --watch` (issue 38).

The watcher thread (``Stalls.run``) looks twice a second for the next trigger file (another rank's incident)
and for how long ago this rank's last step ended: past a quarter of the process group's timeout (at least 10
baseline steps and 2 s; ``DDPDOCTOR_WATCH_HANG_S`` overrides) it creates a ``hang`` trigger.  For a ``hang`` or
``failure`` trigger every rank's thread writes its stacks and records into the incident while the job still
lives (``watch_incident.dump_hang``).  A rank dying of an uncaught exception files a ``failure`` incident with
its own log (``failed``).
"""

from __future__ import annotations

import time

from . import watch_incident as _files

HANG_FRACTION = 0.25
HANG_FLOOR_S = 2.0
POLL_S = 0.5


def _env_num(env, name, default):
    try:
        return float(env.get(name, default))
    except (TypeError, ValueError):
        return default


def pg_timeout(torch) -> float | None:
    """The default process group's timeout in seconds (its backend's options), or None."""
    try:
        pg = torch.distributed.distributed_c10d._get_default_group()
        return pg._get_backend(torch.device("cpu")).options._timeout.total_seconds()
    except Exception:
        return None


class Stalls:
    def __init__(self, watch):
        self.w = watch
        env = watch.agent.env
        self.hang_fraction = _env_num(env, "DDPDOCTOR_WATCH_HANG_FRACTION", HANG_FRACTION)
        self.hang_s_override = _env_num(env, "DDPDOCTOR_WATCH_HANG_S", 0.0)
        self.pg_timeout_s: float | None = None
        self.hang_filed_at: int | None = None  # the step a hang incident was filed at: none again until a step
        self.failure: dict | None = None  # the run's failure incident, once there is one: later deaths join it
        self.hang: dict | None = None  # the last hang incident: a death at its step (the timeout) joins it

    def hang_after_s(self) -> float | None:
        if self.hang_s_override > 0:
            return self.hang_s_override
        if self.pg_timeout_s is None:
            return None
        base = self.w.detector.baseline.median_s if self.w.detector.baseline else 0.0
        return max(self.hang_fraction * self.pg_timeout_s, 10 * base, HANG_FLOOR_S)

    def run(self) -> None:
        a = self.w.agent
        while not a.finalized:
            time.sleep(POLL_S)
            try:
                self.once(time.time())
            except Exception as exc:  # never takes the rank down
                a.internal_error("watch thread", exc)
                return

    def once(self, now: float) -> None:
        a = self.w.agent
        self.w.check_trigger()
        t = self.w.pending
        if t is not None and t["kind"] in ("hang", "failure") and t["n"] not in self.w.filed:
            _files.dump_hang(a, t)
            if t["kind"] == "failure":
                self.failure = t
            else:
                self.hang = t
            self.w.filed.append(t["n"])
            self.hang_filed_at = a.window.steps
            self.w.pending = None
            self.w.write_state()
            return
        limit = self.hang_after_s()
        if (
            limit is None
            or t is not None
            or self.w.recording is not None
            or a.window.steps <= self.w.detector.cfg.warmup
            or self.w.next_n > self.w.max_incidents
            or self.hang_filed_at == a.window.steps
        ):
            return
        idle = now - a.window.last_step_time
        if idle > limit:
            self.w.claim(
                {
                    "n": self.w.next_n,
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

    def failed(self, why: str) -> None:
        """This rank dies of an uncaught exception: a ``failure`` incident with its records (the others' watchers
        add their stacks: they are about to wait for it in their next collective)."""
        a = self.w.agent
        self.w.check_trigger()
        t = self.w.pending if (self.w.pending or {}).get("kind") == "failure" else self.failure
        if t is None and self.hang is not None and self.hang_filed_at == a.window.steps:
            t = self.hang  # the stall it recorded ended this way (the process group's timeout): one incident
        if t is None:  # the first rank to fail: a new incident (a peer that dies of it joins this one)
            if self.w.next_n > self.w.max_incidents:
                return
            trigger = {"n": self.w.next_n, "kind": "failure", "step": a.window.steps, "steps": 0, "rank": a.rank}
            trigger.update(time=time.time(), why=f"rank {a.rank}: {why}")
            self.w.pending = None
            self.w.claim(trigger)
            t = self.w.pending
        if t is None:
            return
        _files.file_failure(a, t)
        if t["n"] not in self.w.filed:
            self.w.filed.append(t["n"])
        self.w.pending = None
