"""Facts about how the DataLoader spent the profiled window (``loader.*``), from each rank's
``settings.json`` ``loader_window`` (capture/agent/loader.py).  Pure Python, no torch.

The loading's CPU share tells a loader that computes (decoding, augmentation: more workers need more
CPUs) from one that waits (storage, network, locks: more workers overlap the waits even on few CPUs):

- with workers: their CPU time over the window / (workers x window wall time);
- without workers (num_workers=0): the training thread's CPU time inside ``next(loader)`` / its wall
  time there (the loading runs in that call).

The per-batch latency is what one worker needs to produce one batch.  Without workers it is measured
(the wall time inside ``next()`` per batch).  With W workers on a run that waits for them, each worker
is always busy (the main process takes batches faster than they come), so W workers deliver one batch
per window / batches: latency = W x window / batches.  The compute per batch is the rest of the window
per batch.  Enough workers hide the loading when workers x compute >= latency:
``loader.workers_needed = ceil(latency / compute)``.  ``prefetch_factor`` does not enter it: it sets how
many batches wait ready per worker (it absorbs jitter), not how fast a worker makes one.
"""

from __future__ import annotations

import math
from statistics import median

from .values import PROC_TICK_S, as_number


def rank_loader(rec: object) -> dict | None:
    """One rank's window: cpu_share, batch_latency_ms, compute_ms_per_batch, workers_needed (None if unmeasured)."""
    if not isinstance(rec, dict):
        return None
    wall, batches = as_number(rec.get("wall_s")), as_number(rec.get("batches"))
    nxt, nxt_cpu = as_number(rec.get("next_wall_s")), as_number(rec.get("next_cpu_s"))
    if not wall or wall <= 0 or not batches or batches < 2 or nxt is None:
        return None
    workers = rec.get("num_workers")
    workers = workers if isinstance(workers, int) and not isinstance(workers, bool) and workers >= 0 else None
    if workers is None:
        return None
    out: dict = {"workers": workers}
    compute = (wall - nxt) / batches
    # the share is of the time the loading could run: time spent runnable without a CPU (a contended host)
    # is taken out, or a CPU-bound loader on a busy machine would look like one that waits
    if workers == 0:
        latency = nxt / batches
        avail = nxt - (as_number(rec.get("next_runqueue_s")) or 0.0)
        out["cpu_share"] = min(1.0, nxt_cpu / avail) if nxt_cpu is not None and avail > 0 else None
    else:
        latency = workers * wall / batches
        wcpu = as_number(rec.get("workers_cpu_s"))
        avail = workers * wall - (as_number(rec.get("workers_runqueue_s")) or 0.0)
        out["cpu_share"] = min(1.0, wcpu / avail) if wcpu is not None and avail > 0 else None
    loading_cpu = nxt_cpu if workers == 0 else as_number(rec.get("workers_cpu_s"))
    if loading_cpu is not None:  # what one batch costs to load, wherever it is loaded
        out["cpu_ms_per_batch"] = round(1000 * loading_cpu / batches, 3)
        # the readings' ticks, and with workers the batches in flight at the window's edges: each worker is
        # part-way through a batch at the start and at the end, so the window holds its work on up to one
        # batch more or less than the batches it handed over (5 batches from 2 workers: up to 40 %)
        in_flight_s = workers * loading_cpu / batches
        out["cpu_resolution_ms"] = round(
            1000 * (THREAD_CLOCK_S if workers == 0 else 2 * PROC_TICK_S * workers + in_flight_s) / batches, 3
        )
    out["batch_latency_ms"] = round(1000 * latency, 3)
    out["compute_ms_per_batch"] = round(1000 * compute, 3)
    out["wait_share"] = round(nxt / wall, 4)
    out["workers_needed"] = math.ceil(round(latency / compute, 6)) if compute > 0 else None  # 4.0000001 is 4
    if out["cpu_share"] is not None:
        out["cpu_share"] = round(out["cpu_share"], 4)
    return out


THREAD_CLOCK_S = 0.001  # the training thread's CPU time (time.thread_time) is good to well under a ms


def costlier_loading(per: dict[int, dict], min_ratio: float) -> tuple[int, float, float] | None:
    """(rank, its loading CPU ms per batch, the other ranks' median) of the one rank whose batches cost
    at least ``min_ratio`` times the others' median CPU to load, by more than the readings' resolution
    (both ends of two readings; with workers, also the batches in flight at the window's edges): one rank's
    shard of bigger files or longer samples, not the scheduler."""
    cost = {r: x["cpu_ms_per_batch"] for r, x in per.items() if x.get("cpu_ms_per_batch") is not None}
    if len(cost) < 2:
        return None
    rank = max(cost, key=lambda r: (cost[r], -r))
    mid = median(v for r, v in cost.items() if r != rank)
    if cost[rank] - mid > per[rank]["cpu_resolution_ms"] and cost[rank] >= min_ratio * mid:
        return rank, cost[rank], mid
    return None


def loader_facts(ranks: dict[int, dict], params: dict) -> dict:
    """``loader.cpu_share``: the busiest rank's (the loading is called waiting only if it waits on every
    rank); latency, compute and workers needed: of the rank that needs most workers (one rank's numbers,
    so the fix's arithmetic holds as printed); ``.per_rank`` companions where ranks differ."""
    per = {r: x for r in sorted(ranks) if (x := rank_loader(ranks[r].get("loader_window"))) is not None}
    if not per:
        return {}
    facts: dict = {}
    shares = {r: x["cpu_share"] for r, x in per.items() if x.get("cpu_share") is not None}
    if shares:
        _put(facts, "loader.cpu_share", max(shares.values()), shares)
    needs = {r: x["workers_needed"] for r, x in per.items() if x.get("workers_needed") is not None}
    if needs:
        worst = max(needs, key=lambda r: (needs[r], -r))
        for key in ("workers_needed", "batch_latency_ms", "compute_ms_per_batch"):
            _put(facts, f"loader.{key}", per[worst][key], {r: x[key] for r, x in per.items()})
    cpu = {r: x["cpu_ms_per_batch"] for r, x in per.items() if x.get("cpu_ms_per_batch") is not None}
    if cpu:
        _put(facts, "loader.cpu_ms_per_batch", max(cpu.values()), cpu)
    found = costlier_loading(per, params["loader_costlier_min_ratio"])
    if found:
        rank, ms, mid = found
        # the delay it adds to each step: its extra CPU per batch, spread over its workers (they load in parallel)
        facts["loader.costlier.rank"] = rank
        facts["loader.costlier.cpu_ms_per_batch"] = ms
        facts["loader.costlier.others_ms_per_batch"] = round(mid, 3)
        if mid > 0:
            facts["loader.costlier.ratio"] = round(ms / mid, 3)
        facts["loader.costlier.ms_per_step"] = round((ms - mid) / max(1, per[rank]["workers"]), 3)
    return facts


def _put(facts: dict, name: str, value, per_rank: dict) -> None:
    facts[name] = value
    if len(per_rank) > 1 and len(set(per_rank.values())) > 1:
        facts[f"{name}.per_rank"] = per_rank


def dataset_facts(ranks: dict[int, dict]) -> dict:
    """``data.whole_dataset_per_rank``: on every rank (two or more) one epoch yields as many samples as the
    dataset holds (nothing shards it); ``data.same_dataset``: every rank recorded a content fingerprint of
    the same fixed items and they agree (the missing-sampler rule: every rank walks the same whole
    dataset, whatever its shuffle seed).  Absent when fewer than two ranks recorded what they need."""
    facts: dict = {}
    loaders = {r: d["dataloader"] for r, d in ranks.items() if isinstance(d.get("dataloader"), dict)}
    covers = {
        r: dl.get("samples_per_epoch") == dl.get("dataset_len")
        for r, dl in loaders.items()
        if isinstance(dl.get("samples_per_epoch"), int) and isinstance(dl.get("dataset_len"), int)
    }
    if len(covers) >= 2:
        facts["data.whole_dataset_per_rank"] = all(covers.values())
    fps = {r: dl.get("dataset_fingerprint") for r, dl in loaders.items() if "dataset_fingerprint" in dl}
    if len(fps) >= 2 and all(isinstance(v, str) for v in fps.values()):
        facts["data.same_dataset"] = len(set(fps.values())) == 1
    elif len(covers) >= 2 and not all(covers.values()):
        facts["data.same_dataset"] = False  # a rank whose epoch is a part: not fingerprinted, not the same walk
    return facts
