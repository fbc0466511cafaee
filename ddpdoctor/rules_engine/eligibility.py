"""Which costs may decide the verdict (rules_engine/verdict.py reads these): when a late rank's lateness is
its own (a cause the evidence names) and when it is a cost every rank pays, or machine noise.  Thresholds,
columns and per-category facts come from rules/metrics.toml ``[verdict]`` (``t`` below); no rule id here."""

from __future__ import annotations

from .engine import Finding


def is_sporadic(f: Finding, facts: dict, t: dict) -> bool:
    """A cost that shows on some ranks only and in few of their steps. Every rank runs the same
    training code, so the workload's own cost shows on every rank, step after step; unless a measurement
    of every rank (metrics.toml ``every_rank_pays``) shows the cost material on all of them."""
    analyzed = facts.get("run.ranks_analyzed")
    return (
        isinstance(analyzed, int)
        and 0 < len(f.ranks or []) < analyzed
        and f.agreement is not None
        and f.agreement < t["sporadic_max_agreement"]
        and not every_rank_pays(f.category, facts, t)
    )


def every_rank_pays(category: str, facts: dict, t: dict) -> bool:
    """The category's every-rank measurement (the least of the ranks) reaches its materiality."""
    name = t.get("every_rank_pays", {}).get(category)
    value = facts.get(name) if name else None
    return isinstance(value, (int, float)) and value >= t.get("materiality", {}).get(category, 0.0)


def late_in_a_shared_cost(findings: list[Finding], facts: dict, t: dict) -> Finding | None:
    """The finding whose cost every analyzed rank pays, material, in the very column where the late rank
    spends its extra time (e.g. the loader's wait on every rank, the straggler late in its DataLoader wait),
    when nothing of the late rank's own explains it: then fixing that cost removes the lateness too."""
    if straggler_explained(facts, t):
        return None
    column, analyzed = facts.get("straggler.extra_column"), facts.get("run.ranks_analyzed")
    if not column or not isinstance(analyzed, int) or analyzed < 2:
        return None
    materiality = t.get("materiality", {})
    for f in findings:
        cols = t.get("own_variation_columns", {}).get(f.category, ())
        if (
            column in cols
            and f.cost is not None
            and f.cost >= materiality.get(f.category, 0.0)
            and (len(set(f.ranks or [])) >= analyzed or equal_work_measured(f.category, facts, t))
        ):
            return f
    return None


def equal_work_measured(category: str, facts: dict, t: dict) -> bool:
    """Every rank's work in this cost was measured and none does materially more (metrics.toml
    ``equal_work``: e.g. every rank's loading CPU per batch, and no rank whose batches cost more): the
    ranks pay the same cost, even where it stays under its rule's bar on the ranks that wait less."""
    spec = t.get("equal_work", {}).get(category)
    if not spec or facts.get(spec["uneven"]) is not None:
        return False
    measured, analyzed = facts.get(spec["measured"] + ".per_rank"), facts.get("run.ranks_analyzed")
    if isinstance(measured, dict):
        return isinstance(analyzed, int) and len(measured) >= analyzed
    return facts.get(spec["measured"]) is not None  # one value: every rank measured the same


def straggler_explained(facts: dict, t: dict) -> bool:
    """The late rank's extra time has a cause of its own (metrics.toml ``straggler_causes``): the Python
    sampler's extra work on that rank, its longer GC pauses, calls that held the GIL, whose excess per step
    (summed over the causes that name it: sampled time and the sampler's gaps do not overlap) accounts for
    at least ``attributed_min_share`` of its lateness (a GIL gap of 16 ms does not explain a rank 36 ms
    late); an excess not measured counts as explaining it.  Or the inputs differ between ranks."""
    rank = facts.get("straggler.rank")
    if rank is None:
        return False
    late, named, total = facts.get("straggler.late_us"), False, 0.0
    for cause in t.get("straggler_causes", []):
        if facts.get(cause["rank"]) == rank:
            named = True
            ms = facts.get(cause["ms_per_step"])
            if not isinstance(ms, (int, float)):
                return True
            total += ms
    unmeasured = not isinstance(late, (int, float)) or late <= 0
    if named and (unmeasured or 1000.0 * total >= t["attributed_min_share"] * late):
        return True
    return any(facts.get(name) == value for name, value in t.get("uneven_inputs", {}).items())


def unexplained_straggler(facts: dict, t: dict) -> bool:
    """The straggler's extra time has no cause of its own: the Python sampler saw no extra work on that
    rank, the inputs are not uneven, and its extra time lies where lost CPU cycles show, or mostly
    nowhere (the phase in which it differs most holds under `attributed_min_share` of its lateness)."""
    if straggler_explained(facts, t):
        return False
    cols = t["noise_columns_gpu"] if facts.get("run.device") == "gpu" else t["noise_columns_cpu"]
    if facts.get("straggler.extra_column") in cols:
        return True
    extra, late = facts.get("straggler.extra_us"), facts.get("straggler.late_us")
    return (
        isinstance(extra, (int, float))
        and isinstance(late, (int, float))
        and late > 0
        and extra < t["attributed_min_share"] * late
    )


def same_work_on_shared_cores(facts: dict, t: dict) -> bool:
    """The late rank computes the same inputs longer on CPU cores that its host shares among several ranks,
    and nothing of its own explains it (metrics.toml ``shared_cores``): CPU ranks have no device of their
    own, so a rank that runs the same operators on the same shapes slower got slower cores (an SMT sibling,
    a busier or throttled core, caches shared with the other ranks), which the OS changes from run to run:
    the host, not the workload's imbalance."""
    spec = t.get("shared_cores")
    if not spec or facts.get("run.device") != spec["device"] or straggler_explained(facts, t):
        return False
    local = facts.get(spec["ranks_on_host"])
    return (
        isinstance(local, int)
        and local >= 2
        and facts.get("cross.input_shapes") == spec["inputs"]
        and facts.get("straggler.extra_column") in spec["columns"]
    )


def saturating_loader(findings: list[Finding], t: dict) -> Finding | None:
    """The material finding whose evidence says the job's own DataLoader workers oversubscribe its CPUs
    (metrics.toml ``own_cpu_saturation``: a finding of ``category`` whose evidence ``evidence`` is true): the
    job by itself wants more CPUs than its host has and its workers compute and wait for a CPU, so the loading's
    CPU is the cost to fix first, whatever else waits for those cores."""
    spec = t.get("own_cpu_saturation")
    if not spec:
        return None
    bar = t.get("materiality", {}).get(spec["category"], 0.0)
    return next(
        (
            f
            for f in findings
            if f.category == spec["category"]
            and f.evidence.get(spec["evidence"]) is True
            and f.cost is not None
            and f.cost >= bar
        ),
        None,
    )


def starved_by_loader(f: Finding, facts: dict, t: dict) -> bool:
    """A cost that runs on the cores the loader oversubscribes: the collectives of a backend that moves the
    data with CPU threads (gloo), whose time then waits for a CPU as much as it transfers."""
    spec = t["own_cpu_saturation"]
    return f.category in spec["starved_categories"] and facts.get("run.backend") in spec["cpu_backends"]


def late_in_saturated_cores(facts: dict, t: dict) -> bool:
    """The late rank's extra time lies where CPUs shared with the loader's workers slow a rank (its DataLoader
    wait, its CPU compute, untraced time) and nothing of its own explains it: which rank the scheduler starves
    changes from run to run, and the loader's fix removes its lateness too."""
    columns = t["own_cpu_saturation"]["late_columns"].get(facts.get("run.device"), ())
    return not straggler_explained(facts, t) and facts.get("straggler.extra_column") in columns
