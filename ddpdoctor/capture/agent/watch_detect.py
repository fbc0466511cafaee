"""Part of the capture agent (standard library only, no clock, no files): the online step-time detector of
``ddpdoctor run --watch`` (issue 38), a pure state machine that ``tests/capture/test_watch_detect.py`` feeds
with sequences built in code.

- **Warm-up.** The first ``warmup`` steps are never looked at (compilation, allocator growth, the loader's
  first batches).
- **Baseline.** The next ``learn`` steps give the baseline: their median and a robust spread (1.4826 x the
  median absolute deviation, at least ``floor`` of the median).  It is refreshed every ``learn`` steps from
  the last ``learn`` steps while nothing is above the line, so a slow drift on a shared host moves it with
  the job; after an incident it is learned again from scratch (the change was reported: it is the new normal).
- **The line.** A step is slow when it lasts more than the median plus ``max(sigmas x spread, margin x
  median)`` (2 spreads: the window below, not one step, carries the proof): a material change (``margin``, 50 % by default) that is also beyond the job's own noise.
- **The alarm.** At least ``hits`` (80 %) of the last ``window`` steps are slow, the window being at least 10
  steps and at least ``window_s`` (2 s) of baseline steps: a single spike, a few, or a burst shorter than about
  1.6 s (another process taking the cores for a moment) never raise it; a step change raises it within about
  ``hits`` steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class DetectorConfig:
    warmup: int = 20
    learn: int = 40
    margin: float = 0.5
    sigmas: float = 2.0
    floor: float = 0.03
    window: int = 10  # steps, at least ...
    window_s: float = 2.0  # ... and at least this long at the baseline's median step
    hit_share: float = 0.8


@dataclass(frozen=True)
class Baseline:
    median_s: float
    spread_s: float
    learned_at: int  # the step whose end completed it
    steps: int  # steps it was learned from

    def line_s(self, cfg: DetectorConfig) -> float:
        return self.median_s + max(cfg.sigmas * self.spread_s, cfg.margin * self.median_s)

    def as_dict(self) -> dict:
        return {
            "median_s": round(self.median_s, 6),
            "spread_s": round(self.spread_s, 6),
            "learned_at_step": self.learned_at,
            "steps": self.steps,
        }


@dataclass(frozen=True)
class Alarm:
    step: int  # the step at which the alarm rose
    onset: int  # the first slow step of the window that raised it: where the change began
    median_s: float  # the median of the slow steps in the detector's window
    baseline: Baseline

    @property
    def ratio(self) -> float:
        return self.median_s / self.baseline.median_s if self.baseline.median_s > 0 else float("inf")


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def robust_baseline(times: list[float], step: int, floor: float) -> Baseline:
    med = _median(times)
    mad = _median([abs(t - med) for t in times])
    return Baseline(med, max(MAD_TO_SIGMA * mad, floor * med), step, len(times))


FAST_RUN = 5  # consecutive steps under the line that end a slow stretch (0.2**5: rare inside one)


def _onset_index(slow: list[bool]) -> int:
    """The first slow step after the last run of ``FAST_RUN`` steps under the line in the window (a stray slow
    step before the change, noise, is not its start)."""
    start, fast = 0, 0
    for i, s in enumerate(slow):
        fast = 0 if s else fast + 1
        if fast >= FAST_RUN:
            start = i + 1
    return next((i for i in range(start, len(slow)) if slow[i]), len(slow) - 1)


def window_steps(cfg: DetectorConfig, median_s: float) -> int:
    by_time = math.ceil(cfg.window_s / median_s) if median_s > 0 else cfg.window
    return max(cfg.window, min(by_time, 10_000))


@dataclass
class StepDetector:
    cfg: DetectorConfig = field(default_factory=DetectorConfig)
    baseline: Baseline | None = None
    seen: int = 0  # steps fed since the start (or since the last re-learn began)
    learning: list[float] = field(default_factory=list)
    recent: list[float] = field(default_factory=list)  # the last cfg.window steps (seconds)
    recent_slow: list[bool] = field(default_factory=list)
    since_refresh: list[float] = field(default_factory=list)
    skip: int = 0  # steps still to ignore (warm-up, or the recording of an incident)
    window_n: int = 0  # the alarm's window in steps, set with the baseline

    def __post_init__(self) -> None:
        self.skip = self.cfg.warmup

    def relearn(self, skip: int = 0) -> None:
        """Forget the baseline: the next ``learn`` steps after ``skip`` ignored ones give a new one."""
        self.baseline, self.learning, self.since_refresh = None, [], []
        self.recent, self.recent_slow = [], []
        self.skip = max(self.skip, skip)

    def add(self, step: int, seconds: float) -> Alarm | None:
        """One step's wall time; an Alarm when the line has been crossed in enough of the last steps."""
        self.seen += 1
        if self.skip > 0:
            self.skip -= 1
            return None
        cfg = self.cfg
        if self.baseline is None:
            self.learning.append(seconds)
            if len(self.learning) >= cfg.learn:
                self.baseline = robust_baseline(self.learning, step, cfg.floor)
                self.learning = []
                self.window_n = window_steps(cfg, self.baseline.median_s)
            return None
        slow = seconds > self.baseline.line_s(cfg)
        self.recent.append(seconds)
        self.recent_slow.append(slow)
        del self.recent[: -self.window_n], self.recent_slow[: -self.window_n]
        if len(self.recent) >= self.window_n and sum(self.recent_slow) >= math.ceil(cfg.hit_share * self.window_n):
            slow_times = [t for t, s in zip(self.recent, self.recent_slow) if s]
            onset = step - len(self.recent) + 1 + _onset_index(self.recent_slow)
            return Alarm(step, onset, _median(slow_times), self.baseline)
        self._refresh(step, seconds)
        return None

    def _refresh(self, step: int, seconds: float) -> None:
        """Every ``learn`` steps of which at most one in ten was slow, the baseline follows the job (a slow drift
        moves it; the start of a step change, whose steps are mostly slow, never does)."""
        self.since_refresh.append(seconds)
        if len(self.since_refresh) < self.cfg.learn:
            return
        batch, self.since_refresh = self.since_refresh, []
        line = self.baseline.line_s(self.cfg) if self.baseline else float("inf")
        if sum(t > line for t in batch) > len(batch) // 10:
            return
        self.baseline = robust_baseline(batch, step, self.cfg.floor)
        self.window_n = window_steps(self.cfg, self.baseline.median_s)
