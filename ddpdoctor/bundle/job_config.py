"""Facts on the job's own configuration that makes it slow or broken, from each rank's ``settings.json``:
autograd anomaly mode when the window started (``autograd``), the DDP model's parameter bytes per dtype
(``ddp.param_bytes_by_dtype``) and the world size / rank the script passed to ``init_process_group``
beside the launcher's (``init_process_group``).  All written by capture/agent/recorder.py.

``job_config_facts(ranks)``: ``ranks`` = {rank: settings dict}.  A fact is absent when no rank recorded
it (an older bundle, a run that never reached the call); the lowest rank's value is the run's, with
``.per_rank`` where ranks differ.  Pure Python: no torch.
"""

from __future__ import annotations

from .values import as_number, put_fact


def _record(d: dict, field: str) -> dict:
    rec = d.get(field)
    return rec if isinstance(rec, dict) else {}


def _int(x) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _put(facts: dict, name: str, per: dict[int, object]) -> None:
    per = {r: v for r, v in per.items() if v is not None}
    if per:
        put_fact(facts, name, per[min(per)], per)


def _put_min(facts: dict, name: str, per: dict[int, float | None]) -> None:
    known = {r: v for r, v in per.items() if v is not None}
    if known:
        put_fact(facts, name, min(known.values()), known)


def _float64_share(d: dict) -> float | None:
    ddp = _record(d, "ddp")
    by_dtype = ddp.get("param_bytes_by_dtype") if ddp.get("used") else None
    if not isinstance(by_dtype, dict):
        return None
    sizes = {k: v for k, v in by_dtype.items() if _int(v) is not None and v >= 0}
    total = sum(sizes.values())
    return round(sizes.get("float64", 0) / total, 6) if total > 0 else None


def _anomaly_ms_per_step(d: dict) -> float | None:
    """Anomaly mode's forward cost per step: the extra µs per autograd node the agent timed (at its hook's
    stack), scaled down when the model's nodes stored shorter tracebacks than the timed one (never up: a
    deeper stack costs more, so a lower bound), x the nodes of one forward x the forwards per optimizer
    step.  The backward's NaN checks are not counted (a lower bound too)."""
    rec = _record(d, "autograd")
    keys = ("anomaly_us_per_node", "anomaly_timed_frames", "graph_nodes_per_forward", "graph_frames_per_forward")
    vals = [v for k in keys if (v := as_number(rec.get(k))) is not None]
    if not rec.get("anomaly_enabled") or len(vals) < len(keys) or not vals[2]:
        return None
    per_node, timed_frames, nodes, frames = vals
    scale = min(1.0, frames / nodes / timed_frames) if timed_frames else 1.0
    forwards = as_number(_record(d, "train").get("micro_batches_per_step")) or 1.0
    return round(per_node * scale * nodes * forwards / 1000.0, 3)


def _share_of_step(d: dict, ms: float | None) -> float | None:
    median_s = as_number(_record(d, "step_time_s").get("median"))
    return round(min(1.0, ms / (median_s * 1000.0)), 6) if ms is not None and median_s else None


def job_config_facts(ranks: dict[int, dict]) -> dict:
    facts: dict = {}
    for name, key in (
        ("config.autograd.anomaly", "anomaly_enabled"),
        ("config.autograd.anomaly_check_nan", "anomaly_check_nan"),
    ):
        per = {r: _record(d, "autograd").get(key) for r, d in ranks.items()}
        _put(facts, name, {r: v for r, v in per.items() if isinstance(v, bool)})
    # the smallest over the ranks: each timing is the fastest of a few, and a rank whose timing other processes
    # slowed must not raise a lower bound
    anomaly_ms = {r: _anomaly_ms_per_step(d) for r, d in ranks.items()}
    _put_min(facts, "config.autograd.anomaly_ms_per_step", anomaly_ms)
    _put_min(facts, "config.autograd.anomaly_share", {r: _share_of_step(d, anomaly_ms[r]) for r, d in ranks.items()})
    _put(facts, "config.ddp.float64_param_share", {r: _float64_share(d) for r, d in ranks.items()})
    _put(
        facts,
        "config.ddp.float64_slowdown",
        {r: as_number(_record(d, "ddp").get("float64_slowdown")) for r, d in ranks.items() if _float64_share(d)},
    )
    inits = {r: _record(d, "init_process_group") for r, d in ranks.items()}
    _put(facts, "config.init.world_size_arg", {r: _int(i.get("world_size_arg")) for r, i in inits.items()})
    _put(facts, "config.init.rank_arg", {r: _int(i.get("rank_arg")) for r, i in inits.items()})
    _put(facts, "config.init.launcher_world_size", {r: _int(i.get("env_world_size")) for r, i in inits.items()})
    # the script asked for another world size than the launcher started: the store waits for ranks that never come
    mismatch = {
        r: i["world_size_arg"] != i["env_world_size"]
        for r, i in inits.items()
        if _int(i.get("world_size_arg")) is not None and _int(i.get("env_world_size")) is not None
    }
    _put(facts, "config.init.world_size_mismatch", mismatch)
    return facts
