"""Part of the capture agent (standard library only, no clock, no files): the online step-time detector of
``ddpdoctor run --watch`` (issue 38), a pure state machine that ``tests/capture/test_watch_detect.py`` feeds
with sequences built in code.

- **Warm-up.** The first ``warmup`` steps are never looked at (compilation, allocator growth, the loader's
  first batches).
- **Baseline.** The next ``learn`` steps give the baseline: their median, mean and a robust spread (1.4826 x
  the median absolute deviation, at least ``floor`` of the median).  It follows the job every ``learn`` steps
  of which at most one in ten was above the line (a slow drift moves it, the start of a change never does);
  after an incident it is learned again from scratch (the change was reported: it is the new normal).
- **The window** holds the last steps that add up to ``window_s`` of wall time (2 s, at least ``window``
  steps): a burst shorter than about half of it never fills it, however slow.
- **Two alarms**, checked once the window is full: *level*, the window's median above the baseline median
  by ``margin`` (50 %) and by more than its own noise (``sigmas`` standard errors of a median of that many
  steps); *pauses*, the window's mean without its single longest step above the baseline mean by
  ``pause_margin`` (50 %): periodic pauses (a collector, a flush) that leave the median alone, while one
  spike, dropped, never raises it.
- **The onset** is a CUSUM's change point in the window (``change_point``): where the suffix of (step - k) sums
  highest, k half-way between the baseline and the window's last quarter.
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
    pause_margin: float = 0.5
    sigmas: float = 4.0
    floor: float = 0.03
    window: int = 10  # steps, at least ...
    window_s: float = 2.0  # ... and this much wall time


@dataclass(frozen=True)
class Baseline:
    median_s: float
    spread_s: float
    learned_at: int  # the step whose end completed it
    steps: int  # steps it was learned from
    mean_s: float = 0.0

    def line_s(self, cfg: DetectorConfig) -> float:
        """A step above this is slow (for the onset and the refresh)."""
        return self.median_s * (1 + cfg.margin)

    def median_line_s(self, cfg: DetectorConfig, n: int) -> float:
        """The window's median above this is a change: material, and beyond the median's own noise."""
        noise = cfg.sigmas * 1.2533 * self.spread_s / math.sqrt(max(1, n))
        return self.median_s + max(cfg.margin * self.median_s, noise)

    def as_dict(self) -> dict:
        return {
            "median_s": round(self.median_s, 6),
            "spread_s": round(self.spread_s, 6),
            "learned_at_step": self.learned_at,
            "steps": self.steps,
            "mean_s": round(self.mean_s, 6),
        }


@dataclass(frozen=True)
class Alarm:
    step: int  # the step at which the alarm rose
    onset: int  # the first slow step of the window that raised it: where the change began
    median_s: float  # the window's median (a level alarm) or its mean without the longest step (pauses)
    baseline: Baseline
    how: str = "level"  # "level" or "pauses"
    steps: int = 0  # the window's steps

    @property
    def ratio(self) -> float:
        base = self.baseline.mean_s if self.how == "pauses" else self.baseline.median_s
        return self.median_s / base if base > 0 else float("inf")


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def robust_baseline(times: list[float], step: int, floor: float) -> Baseline:
    med = _median(times)
    mad = _median([abs(t - med) for t in times])
    return Baseline(med, max(MAD_TO_SIGMA * mad, floor * med), step, len(times), sum(times) / len(times))


FAST_RUN = 5  # consecutive steps under the line that end a slow stretch (0.2**5: rare inside one)


def change_point(times: list[float], before: float) -> int:
    """Where the window's change began: the start of the suffix whose sum of (step - k) is largest, k half-way
    between ``before`` (the baseline) and the level of the window's last quarter (a CUSUM's estimate: a stray
    slow step followed by normal ones lowers its suffix, so it is not the start)."""
    n = len(times)
    tail = times[-max(3, n // 4) :]
    k = (before + sum(tail) / len(tail)) / 2
    best, best_i, acc = float("-inf"), n - 1, 0.0
    for i in range(n - 1, -1, -1):
        acc += times[i] - k
        if acc > best:
            best, best_i = acc, i
    return best_i


@dataclass
class StepDetector:
    cfg: DetectorConfig = field(default_factory=DetectorConfig)
    baseline: Baseline | None = None
    seen: int = 0  # steps fed since the start
    learning: list[float] = field(default_factory=list)
    recent: list[float] = field(default_factory=list)  # the window: the last steps adding up to window_s
    recent_sum: float = 0.0
    since_refresh: list[float] = field(default_factory=list)
    skip: int = 0  # steps still to ignore (warm-up, or the recording of an incident)

    def __post_init__(self) -> None:
        self.skip = self.cfg.warmup

    @property
    def window_n(self) -> int:
        return len(self.recent)

    def relearn(self, skip: int = 0) -> None:
        """Forget the baseline: the next ``learn`` steps after ``skip`` ignored ones give a new one."""
        self.baseline, self.learning, self.since_refresh = None, [], []
        self.recent, self.recent_sum = [], 0.0
        self.skip = max(self.skip, skip)

    def add(self, step: int, seconds: float) -> Alarm | None:
        """One step's wall time; an Alarm when the window shows a change."""
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
            return None
        self.recent.append(seconds)
        self.recent_sum += seconds
        while len(self.recent) > cfg.window and self.recent_sum - self.recent[0] >= cfg.window_s:
            self.recent_sum -= self.recent.pop(0)
        # (checked every step of a short window, every n/10th of a long one: the sort is the detector's cost)
        due = self.seen % max(1, min(10, len(self.recent) // 10)) == 0
        if due and len(self.recent) >= cfg.window and self.recent_sum >= cfg.window_s:
            alarm = self._alarm(step)
            if alarm is not None:
                return alarm
        self._refresh(step, seconds)
        return None

    def _alarm(self, step: int) -> Alarm | None:
        b, cfg, n = self.baseline, self.cfg, len(self.recent)
        assert b is not None
        med = _median(self.recent)
        if med > b.median_line_s(cfg, n):
            return Alarm(step, step - n + 1 + change_point(self.recent, b.median_s), med, b, "level", n)
        trimmed = (self.recent_sum - max(self.recent)) / (n - 1)
        if b.mean_s > 0 and trimmed > b.mean_s * (1 + cfg.pause_margin):
            return Alarm(step, step - n + 1 + change_point(self.recent, b.mean_s), trimmed, b, "pauses", n)
        return None

    def _refresh(self, step: int, seconds: float) -> None:
        """Every ``learn`` steps of which at most one in ten was slow, the baseline follows the job (a slow drift
        moves it; the start of a step change, whose steps are mostly slow, never does)."""
        self.since_refresh.append(seconds)
        if len(self.since_refresh) < self.cfg.learn:
            return
        batch, self.since_refresh = self.since_refresh, []
        b = self.baseline
        if b is None or sum(t > b.line_s(self.cfg) for t in batch) > len(batch) // 10:
            return
        if sum(batch) / len(batch) > b.mean_s * (1 + self.cfg.margin):  # pauses coming: not a new normal
            return
        self.baseline = robust_baseline(batch, step, self.cfg.floor)
