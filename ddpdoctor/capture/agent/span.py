"""Part of the capture agent: how many steps the window records, agreed by every rank.

Five steps of a 4 ms step are 20 ms: too short for anything measured over the window.  /proc/stat counts
CPU time in 10 ms ticks (a host's busy share over 20 ms is one or two ticks), the stack sampler takes two
samples, the run-queue sampler one, and "last in 4 of 5 steps" is what two equal ranks do by chance in
a third of runs.  So the window records at least ``--active`` steps and at least ``min_window_s`` of
training (``DDPDOCTOR_MIN_WINDOW_S``, 0.5 s unless set; 0 turns it off), never more than ``MAX_ACTIVE``
steps: ``steps_for`` computes the count from the median step time of the warm-up.

Every rank must stop at the same step (a rank that stops training early leaves the others blocked in
their next collective), and each rank's step times differ a little.  So rank 0 decides and writes the
count to the process group's store (the c10d TCPStore torchrun set up: a key-value store beside the
collectives, which this never touches); the other ranks read it, waiting at most ``WAIT_S``.  In a job
that synchronizes every step rank 0 reaches the same boundary within one optimizer step of the others.
Without a process group (one process) the rank's own count holds; when the store cannot be read every
rank keeps ``--active`` (rank 0 included: it checks that its write can be read back first).

Standard library only; the caller guards every call (nothing raises into the user's program).
"""

from __future__ import annotations

import math
from datetime import timedelta

DEFAULT_MIN_WINDOW_S = 0.5
MAX_ACTIVE = 200  # steps: only fast steps are extended, and the window stays about min_window_s long
WAIT_S = 30.0
KEY = "ddpdoctor/window_steps"


def min_window_s(env) -> float:
    try:
        v = float(env.get("DDPDOCTOR_MIN_WINDOW_S", DEFAULT_MIN_WINDOW_S))
    except (TypeError, ValueError):
        return DEFAULT_MIN_WINDOW_S
    return v if v >= 0 and math.isfinite(v) else DEFAULT_MIN_WINDOW_S


def steps_for(active: int, typical_step_s: float | None, min_s: float, max_active: int = MAX_ACTIVE) -> int:
    """Steps to record: ``active``, or more when ``active`` steps of the typical step last under ``min_s``."""
    if not min_s or not typical_step_s or typical_step_s <= 0 or active >= max_active:
        return active
    return max(active, min(max_active, math.ceil(round(min_s / typical_step_s, 6))))


def agreed_steps(torch, env, proposed: int, fallback: int) -> tuple[int, str]:
    """(steps, how they were decided): rank 0's count, shared through the process group's store."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return proposed, "own"
    store = dist.distributed_c10d._get_default_store()
    # the job's id, the same on every node (each node's `ddpdoctor run` has a run id of its own)
    key = f"{KEY}/{env.get('TORCHELASTIC_RUN_ID') or ''}/{env.get('TORCHELASTIC_RESTART_COUNT') or '0'}"
    if dist.get_rank() == 0:
        store.set(key, str(proposed))
        return int(store.get(key)), "rank 0"
    try:
        store.wait([key], timedelta(seconds=WAIT_S))
        return int(store.get(key)), "rank 0"
    except Exception:  # rank 0 never got there: the count every rank was given
        return fallback, "not agreed"
