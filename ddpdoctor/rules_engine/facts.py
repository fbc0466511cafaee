"""The facts rules read: one flat dict of dotted names built from the trace analysis,
plus what a ``ddpdoctor run`` bundle recorded (``config.*``, ``host.*``, ``memory.*``)
and what the logs show (``failure.*``, ``nccl.*``, ``logs.*``).

Per-rank and per-step values are :class:`~.expr.Vec` (NaN where the trace cannot show
the value); everything else is a plain value.  docs/RULES.md lists every name.
"""

from __future__ import annotations

from statistics import median

import numpy as np

from ..expr import Vec
from ..metrics.columns import COLUMNS, PARTITION_CPU, PARTITION_GPU
from ..resources import metric_defaults
from .input_work import input_work_facts
from .phases import phase_facts

# derived columns: the exposed communication split into waiting for peers and transfer
DERIVED = ("comm_wait_exposed", "comm_transfer_exposed")


def _f(v) -> float:
    return float("nan") if v is None else float(v)


def _step_rows(analysis) -> tuple[dict[str, np.ndarray], np.ndarray]:
    cols: dict[str, list[float]] = {c: [] for c in (*COLUMNS, *DERIVED)}
    ranks = []
    for s in analysis.summaries:
        for i in range(len(s.steps)):
            ranks.append(s.rank)
            row = {c: _f(s.values[c][i]) for c in COLUMNS}
            exposed, wait = row["comm_exposed"], row["comm_sync_wait"]
            w = min(exposed, wait) if not np.isnan(wait) else float("nan")
            row["comm_wait_exposed"] = w
            row["comm_transfer_exposed"] = exposed - (0.0 if np.isnan(w) else w)
            for c in cols:
                cols[c].append(row[c])
    return {c: np.asarray(v, dtype=float) for c, v in cols.items()}, np.asarray(ranks, dtype=int)


def trace_facts(analysis, thresholds: dict | None = None) -> dict:
    """Facts from the per-(rank, step) table and the cross-rank metrics (``thresholds``: the analysis's
    rules/metrics.toml, default as shipped)."""
    facts: dict = {"trace.present": True}
    rows, row_ranks = _step_rows(analysis)
    step_time = rows["step_time"]
    with np.errstate(divide="ignore", invalid="ignore"):
        for c, v in rows.items():
            facts[f"step.{c}"] = Vec(v, row_ranks)
            facts[f"step.share.{c}"] = Vec(np.where(step_time > 0, v / step_time, np.nan), row_ranks)
    ranks = np.asarray([s.rank for s in analysis.summaries], dtype=int)
    for c in rows:
        totals = np.asarray(
            [
                np.nansum(rows[c][row_ranks == r]) if not np.all(np.isnan(rows[c][row_ranks == r])) else np.nan
                for r in ranks
            ]
        )
        n = np.asarray([max(1, int(np.sum(row_ranks == r))) for r in ranks])
        st = np.asarray([np.nansum(step_time[row_ranks == r]) for r in ranks])
        facts[f"rank.{c}"] = Vec(totals / n, ranks)
        with np.errstate(divide="ignore", invalid="ignore"):
            facts[f"rank.share.{c}"] = Vec(np.where(st > 0, totals / st, np.nan), ranks)
    extras = sorted({k for s in analysis.summaries for k in s.extras})
    for k in extras:
        facts[f"rank.{k}"] = Vec(np.asarray([_f(s.extras.get(k)) for s in analysis.summaries]), ranks)
    gpu = any(s.device_kind == "gpu" for s in analysis.summaries)
    partition = PARTITION_GPU if gpu else PARTITION_CPU
    avoidable = [c for c in partition if c != "compute"]
    facts["run.partition"] = list(partition)
    facts["run.device"] = "gpu" if gpu else "cpu"
    facts["run.ranks"] = [int(r) for r in ranks]
    facts["run.ranks_analyzed"] = len(ranks)
    if analysis.discovery.chosen is not None:
        facts["run.ranks_chosen"] = analysis.discovery.chosen
    if analysis.discovery.world_size is not None:
        facts["run.world_size"] = int(analysis.discovery.world_size)
    facts["run.partial"] = bool(analysis.partial)
    facts["run.steps"] = int(min(len(s.steps) for s in analysis.summaries)) if analysis.summaries else 0
    facts["run.step_source"] = analysis.summaries[0].step_source if analysis.summaries else None
    facts["run.median_step_us"] = float(np.nanmedian(step_time)) if step_time.size else None
    backends = {s.backend for s in analysis.summaries if s.backend}
    if backends:
        facts["run.backend"] = sorted(backends)[0]
    devices = [d for s in analysis.summaries for d in s.devices]
    if devices:
        facts["run.gpu_model"] = devices[0]
    facts["trace.comm_source"] = analysis.summaries[0].comm_source if analysis.summaries else "none"
    # the biggest avoidable cost per (rank, step) row, for agreement across steps
    shares = (
        np.vstack([np.nan_to_num(rows[c] / np.where(step_time > 0, step_time, np.nan)) for c in avoidable])
        if step_time.size
        else np.zeros((len(avoidable), 0))
    )
    facts["step.top_avoidable"] = Vec(
        np.asarray(avoidable, dtype=object)[np.argmax(shares, axis=0)]
        if step_time.size
        else np.asarray([], dtype=object),
        row_ranks,
    )
    _cross_facts(analysis, facts, ranks)
    _input_facts(analysis, facts, (thresholds or metric_defaults())["inference"])
    phase_facts(analysis.summaries, facts)
    return facts


def _input_facts(analysis, facts: dict, inference: dict) -> None:
    """Do the ranks get inputs of the same shape?  (traces recorded with record_shapes)"""
    rows = [(s.rank, x) for s in analysis.summaries for x in (s.input_shapes or [])]
    seen = [x for _, x in rows if x]
    if len(seen) < 2 or len(seen) < inference["input_shapes_min_coverage"] * len(rows):
        return
    distinct = list(dict.fromkeys(seen))
    facts["cross.input_shapes"] = "constant" if len(distinct) == 1 else "varying"
    facts["cross.input_shape_count"] = len(distinct)
    facts["cross.input_shape_examples"] = [x if len(x) <= 80 else x[:77] + "..." for x in distinct[:3]]
    by_rank = getattr(analysis.cross, "input_shapes_by_rank", {})  # frameworks branch: who holds which shapes
    if len(set(by_rank.values())) > 1:
        facts["cross.input_shapes_by_rank"] = "; ".join(
            f"rank {r}: {x if len(x) <= 80 else x[:77] + '...'}" for r, x in sorted(by_rank.items())
        )
        input_work_facts(by_rank, facts)


def _cross_facts(analysis, facts: dict, ranks: np.ndarray) -> None:
    cr = analysis.cross
    if len(ranks) < 2:
        return  # cross-rank facts stay Missing: imbalance rules abstain
    facts["cross.imbalance_score"] = cr.imbalance_score
    facts["cross.step_spread_us"] = cr.step_time_spread_us
    facts["cross.step_spread_share"] = cr.step_time_spread_share
    facts["cross.matched_collectives"] = cr.matched_collectives
    facts["cross.unmatched_collectives"] = cr.unmatched_collectives
    facts["rank.arrival_late_us"] = Vec(np.asarray([_f(cr.arrival_late_us.get(int(r))) for r in ranks]), ranks)
    facts["straggler.ranks"] = [s.rank for s in cr.stragglers]
    facts["straggler.count"] = len(cr.stragglers)
    if not cr.stragglers:
        return
    worst = max(cr.stragglers, key=lambda s: s.late_us)
    facts.update(
        {
            "straggler.rank": worst.rank,
            "straggler.late_us": worst.late_us,
            "straggler.late_share": worst.late_share,
            "straggler.steps_late": worst.steps_late,
            "straggler.steps": worst.steps,
        }
    )
    # its lateness step by step (a straggler rule's edge: how far from its threshold, in step-to-step noise)
    med_step = facts.get("run.median_step_us") or 0.0
    by_step = [rel[worst.rank] for rel in cr.arrival_by_step.values() if worst.rank in rel]
    if by_step and med_step > 0:
        facts["straggler.late_share_by_step"] = Vec(np.asarray(by_step) / med_step, np.full(len(by_step), worst.rank))
    # where the straggler's extra time goes: its mean per column minus the median of the others
    by_rank = {s.rank: s for s in analysis.summaries}
    me = by_rank[worst.rank]
    others = [s for s in analysis.summaries if s.rank not in {x.rank for x in cr.stragglers}]
    gpu = me.device_kind == "gpu"
    cols = [c for c in (PARTITION_GPU if gpu else PARTITION_CPU) if c != "comm_exposed"]
    extra = {}
    for c in cols:
        mine = [v for v in me.values[c] if v is not None]
        theirs = [
            float(np.mean([v for v in o.values[c] if v is not None]))
            for o in others
            if any(v is not None for v in o.values[c])
        ]
        if mine and theirs:
            extra[c] = float(np.mean(mine)) - median(theirs)
    if extra:
        col = max(extra, key=extra.__getitem__)
        facts["straggler.extra"] = {k: round(v, 1) for k, v in sorted(extra.items(), key=lambda kv: -kv[1])}
        facts["straggler.extra_column"] = col
        facts["straggler.extra_us"] = extra[col]
        med_step = facts.get("run.median_step_us") or 0.0
        facts["straggler.extra_share"] = extra[col] / med_step if med_step > 0 else None


def merge_facts(*sources: dict | None, thresholds: dict | None = None) -> dict:
    """Earlier sources win on a name both give (trace facts first: they were measured).
    Settings the trace implies fill in what the bundle did not record (``thresholds``: the analysis's
    rules/metrics.toml, default as shipped)."""
    out: dict = {}
    for src in sources:
        for k, v in (src or {}).items():
            out.setdefault(k, v)
    single = out.get("rank.dataloader_single_process")
    if isinstance(single, Vec) and not np.all(np.isnan(single.values.astype(float))):
        is_single = bool(np.nanmedian(single.values.astype(float)) >= 0.5)
        out["trace.dataloader_iter"] = "single-process" if is_single else "multi-process"
        if is_single and "config.dataloader.num_workers" not in out:
            out["config.dataloader.num_workers"] = 0
            out["config.dataloader.num_workers_source"] = "trace (_SingleProcessDataLoaderIter)"
    _infer_precision(out, (thresholds or metric_defaults())["inference"])
    if "config.dataloader.num_workers" in out:
        out.setdefault("config.dataloader.num_workers_source", "recorded by ddpdoctor run")
    return out


def _median_of(facts: dict, name: str) -> float | None:
    v = facts.get(name)
    if not isinstance(v, Vec):
        return None
    arr = v.values.astype(float)
    arr = arr[~np.isnan(arr)]
    return float(np.median(arr)) if arr.size else None


def _infer_precision(out: dict, t: dict) -> None:
    """Mixed precision as the GPU kernel names show it, when the bundle did not record it."""
    if "config.mixed_precision" in out:
        return
    fp8, lowp = _median_of(out, "rank.fp8_kernel_share"), _median_of(out, "rank.lowp_kernel_share")
    if fp8 is None or lowp is None:
        return
    if fp8 >= t["fp8_min_kernel_share"]:
        value = "fp8"
    elif lowp >= t["lowp_min_kernel_share"]:
        value = "16-bit"
    elif fp8 + lowp <= t["fp32_max_kernel_share"]:
        value = "none"
    else:
        return
    out["config.mixed_precision"] = value
    out["config.mixed_precision_source"] = "trace (kernel names)"
