"""Part of the capture agent: the step window as a pure state machine.

Step events in (an optimizer step, a DDP forward pass, the script's own profiler starting, the rank
ending), decisions out (start the profiler, mark a step, stop and export, end the rank).  No torch, no
clock (times are passed in), no files: ``tests/capture/test_step_window.py`` runs it without torch.
The agent (``core.py``) feeds it from its torch hooks and carries out each decision with
torch.profiler (``profiler.py``).

- Steps are optimizer steps -- of the first optimizer that steps, others are ignored -- whenever an
  optimizer steps at all.  DDP forward calls count steps only when more than ``forward_fallback``
  forward passes came and no optimizer ever stepped (a custom update, an engine that steps outside
  torch.optim), so gradient accumulation never makes forward passes the unit.  DataLoader batches
  never count steps.
- A step's end is the only boundary seen.  At the boundary that completes ``warmup`` steps the
  window starts (so even warmup 0 records from the second step on); each later boundary is one
  recorded step; after ``active`` recorded steps the window stops, the trace is exported and the
  rank ends (``then_exit``) unless ``keep_going``.  One window per run: after it (or after the
  script started its own profiler) nothing starts again.
- ``manual`` (the script marks its window with ``ddpdoctor.capture.window()``): no window starts at a
  boundary; the script's block starts it (``mark_start``) and ends it, and every boundary inside it is one
  recorded step, however many; the rank is never ended after it.
- Steady start (issue 37): past ``warmup`` the window waits, at most ``steady_within`` more steps, until
  the newest DataLoader iterator has returned more batches than it prefetched at its start
  (``prefetch_factor x num_workers``), so the recorded steps are not served from that buffer.  The count
  is the same on every rank of a job whose ranks build the same loader, so they start at the same step.
  ``drain_probe`` (the agent's loader.LoaderTiming.drain_state) gives the counts; ``steady`` records
  what was decided.  ``steady_within`` 0 turns the wait off (the window starts at ``warmup``).
- The rank ending while the window runs flushes it incomplete; a boundary after the stop was
  requested (a ``finally`` block that steps again) ends the rank again.
"""

from __future__ import annotations

NONE, START, STEP, STOP, EXIT = "none", "start", "step", "stop", "exit"

KEEP_STEP_TIMES = 100  # step durations kept (settings' step_time_s, the watchdog)
KEEP_ACCUMULATION = 200  # per-optimizer-step micro-batch counts kept
TYPICAL_OF_LAST = 20  # the watchdog's typical step: median of the last 20
STEADY_WITHIN = 200  # steps past --warmup the window waits at most for the prefetched buffer to be used up


class Boundary:
    """What one step boundary asks for.  ``step``: 0-based index of the step that just ended;
    ``duration``: seconds since the previous boundary (None for the first, which includes the
    script's setup); ``action``: NONE / START / STEP / STOP / EXIT; ``then_exit``: after STOP, end
    the rank; ``switched``: this boundary is the first counted at DDP forward calls."""

    __slots__ = ("step", "duration", "action", "then_exit", "switched")

    def __init__(self, step: int, duration: float | None):
        self.step, self.duration = step, duration
        self.action, self.then_exit, self.switched = NONE, False, False

    def __repr__(self) -> str:
        return f"Boundary(step={self.step}, action={self.action}, then_exit={self.then_exit})"


def from_env(env, env_int, now: float, drain_probe=None) -> StepWindow:
    """The window as the launcher's variables set it (``env_int(env, name, default)`` reads one): --warmup,
    --active, keep-going, the forward fallback, the steady-start bound, and the loader's drain probe."""
    window = StepWindow(
        env_int(env, "DDPDOCTOR_WARMUP", 5),
        env_int(env, "DDPDOCTOR_ACTIVE", 5),
        env.get("DDPDOCTOR_KEEP_GOING") == "1",
        env_int(env, "DDPDOCTOR_FORWARD_FALLBACK", 64),
        now=now,
        steady_within=env_int(env, "DDPDOCTOR_STEADY_WITHIN", STEADY_WITHIN),
    )
    window.drain_probe = drain_probe  # the window's steady start (issue 37)
    return window


class StepWindow:
    def __init__(
        self,
        warmup: int = 5,
        active: int = 5,
        keep_going: bool = False,
        forward_fallback: int = 64,
        now: float = 0.0,
        steady_within: int | None = None,
    ):
        self.warmup = max(0, warmup)
        self.active = max(1, active)
        self.requested_active = self.active  # --active; ``active`` may grow at the start (span.py)
        self.active_decided_by = None  # "rank 0" / "own" / "not agreed" once the window started
        self.cut_by_script_end = False  # an extended window the script's end cut (after --active steps)
        self.keep_going = keep_going
        self.forward_fallback = max(2, forward_fallback)
        self.steps = 0  # completed steps (boundaries seen)
        self.step_source = None  # "optimizer" or "ddp_forward"
        self.optimizer_seen = False
        self.forward_calls = 0
        self.micro_batches = 0  # DDP/FSDP forward passes since the last optimizer step
        self.synced_micro_batches = 0  # ... of which with gradient sync on (not under no_sync)
        self.micro_per_step: list[int] = []
        self.synced_per_step: list[int] = []
        self.profiling = False
        self.recorded = 0  # active steps recorded
        self.first_step = None  # ProfilerStep# number of the first recorded step
        self.window_done = False
        self.user_profiler = False
        self.stop_requested = False
        self.manual = False  # the script marks the window itself (ddpdoctor.capture.window)
        self.step_times: list[float] = []
        self.last_step_time = now
        self.steady_within = STEADY_WITHIN if steady_within is None else max(0, steady_within)
        self.drain_probe = None  # () -> (prefetched, returned since, ready now) of the newest loader iterator
        self.steady: dict | None = None  # what decided the window's start (settings.json window.steady)

    # ------------------------------------------------------------------ step events
    def optimizer_step(self, own: bool, now: float) -> Boundary | None:
        """An optimizer stepped; ``own``: it is the first optimizer that ever stepped."""
        if not self.optimizer_seen and self.step_source is None:
            self.step_source = "optimizer"
        self.optimizer_seen = True
        if self.step_source != "optimizer" or not own:
            return None
        self.micro_per_step.append(self.micro_batches)
        self.synced_per_step.append(self.synced_micro_batches)
        del self.micro_per_step[:-KEEP_ACCUMULATION], self.synced_per_step[:-KEEP_ACCUMULATION]
        self.micro_batches = self.synced_micro_batches = 0
        return self.boundary(now)

    def micro_batch(self, synced: bool) -> None:
        """One forward pass of the DDP / FSDP root model (gradient accumulation's unit)."""
        self.micro_batches += 1
        if synced:
            self.synced_micro_batches += 1

    def forward(self, synced: bool, now: float) -> Boundary | None:
        """A DDP forward pass: a micro-batch, and a step once steps are counted at forward calls."""
        self.forward_calls += 1
        self.micro_batch(synced)
        if self.step_source == "optimizer":
            return None
        switched = False
        if self.step_source is None and not self.optimizer_seen and self.forward_calls > self.forward_fallback:
            self.step_source, switched = "ddp_forward", True
        if self.step_source != "ddp_forward":
            return None
        b = self.boundary(now)
        b.switched = switched
        return b

    def boundary(self, now: float) -> Boundary:
        """One training step has just finished."""
        dur = now - self.last_step_time
        self.step_times.append(dur)
        del self.step_times[:-KEEP_STEP_TIMES]
        self.last_step_time = now
        self.steps += 1
        b = Boundary(self.steps - 1, dur if self.steps > 1 else None)
        if self.stop_requested:
            b.action = EXIT
        elif (
            not self.profiling
            and not self.window_done
            and not self.user_profiler
            and not self.manual
            and self.steps >= self.warmup
            and self._steady_to_start()
        ):
            b.action = START
        elif self.profiling:
            self.recorded += 1
            if self.manual:
                b.action = STEP
            elif self.recorded >= self.active:
                b.action, b.then_exit = STOP, not self.keep_going
            else:
                b.action = STEP
        return b

    def _steady_to_start(self) -> bool:
        """Past warmup: may the window start at this boundary?  Records the decision when it says yes."""
        state = None
        if self.drain_probe is not None:
            try:
                state = self.drain_probe()
            except Exception:  # the probe is the agent's; a failure leaves the warmup floor
                state = None
        prefetched, consumed, ready = state if state else (0, 0, None)
        waited = self.steps - self.warmup
        if prefetched and consumed <= prefetched and waited < self.steady_within:
            # still waiting: said as it stands, so a job that ends here is told why no window ran
            self.steady = {
                "from_step": None,
                "decided_by": "waiting",
                "warmup": self.warmup,
                "waited_steps": waited + 1,
                "steady_within": self.steady_within,
                "prefetched_batches": prefetched,
                "returned_batches": consumed,
            }
            return False
        if not prefetched:
            how = "warmup"
        elif consumed > prefetched:
            how = "prefetch_used"
        else:
            how = "bound"
        self.steady = {
            "from_step": self.steps,
            "decided_by": how,
            "warmup": self.warmup,
            "waited_steps": waited,
            "steady_within": self.steady_within,
            "prefetched_batches": prefetched,
            "returned_batches": consumed,
            "ready_batches": ready,
        }
        return True

    # ------------------------------------------------------------------ what the agent did
    def started(self) -> None:
        """The profiler runs (after START; a START the agent could not carry out is asked again)."""
        self.profiling = True
        self.first_step = self.steps

    def stopped(self) -> None:
        """The profiler was stopped (complete or not): the run's one window is over."""
        self.profiling = False
        self.window_done = True

    def user_profiler_starts(self) -> bool:
        """The script starts its own profiler: no window from now on.  True the first time (the agent
        then says so and stops its own profiler if ``profiling``)."""
        if self.user_profiler:
            return False
        self.user_profiler = True
        self.window_done = True
        return True

    def take_manual(self) -> bool:
        """The script will mark its window: no automatic one from now on.  False when one already started
        or is over (the script's marks are then ignored)."""
        if self.profiling or self.window_done or self.user_profiler:
            return False
        self.manual = True
        return True

    def request_stop(self) -> bool:
        """The rank is to end after the window; True the first time."""
        if self.stop_requested:
            return False
        self.stop_requested = True
        return True

    def exit(self) -> bool:
        """The rank ends: True when a window runs and must be flushed (incomplete)."""
        return self.profiling

    # ------------------------------------------------------------------ read-outs
    @property
    def complete(self) -> bool:
        if self.manual:
            return self.window_done and self.recorded >= 1
        return self.window_done and self.recorded >= self.requested_active

    @property
    def extended_and_cut(self) -> bool:
        """The window ran past ``--active`` (span.py) and the rank ends inside it: the steps asked for are
        all recorded, and the open step holds only the script's end."""
        return self.profiling and not self.manual and self.recorded >= self.requested_active

    def typical_step_s(self) -> float:
        last = sorted(self.step_times[-TYPICAL_OF_LAST:])
        return last[len(last) // 2] if last else 1.0

    def idle_s(self, now: float) -> float:
        return now - self.last_step_time

    def step_time_values(self) -> list[float]:
        """Step durations for settings' step_time_s: the first (setup included) left out while it is kept."""
        return self.step_times[1:] if self.steps <= KEEP_STEP_TIMES else self.step_times
