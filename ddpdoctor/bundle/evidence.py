"""Facts from the window evidence that `ddpdoctor run` records in each rank's settings.json
(``evidence``: host contention and Python stack samples over the profiled window;
``dataloader.batch_fingerprints`` / ``dataloader.sharded_by``).  Pure Python, no torch.

``evidence_facts(ranks, params)``: ``ranks`` = {rank: settings dict}; ``params`` = the
``[evidence]`` table of rules/metrics.toml.  Every fact is absent when no rank recorded
what it needs (a plain trace, an old bundle, a probe that failed: Linux-only counters).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from statistics import NormalDist, median, stdev
from typing import Any

from ..frames import is_tool_frame
from .loop_collectives import loop_collective_facts
from .values import PROC_TICK_S, as_number, evidence_of, put_fact, safe_where

# ------------------------------------------------------------------ host contention


def _round(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def _host_groups(ranks: dict[int, dict]) -> dict[str, list[int]]:
    hosts: dict[str, list[int]] = {}
    for r in sorted(ranks):
        if evidence_of(ranks[r]).get("contention"):
            hosts.setdefault(str(ranks[r].get("hostname")), []).append(r)
    return hosts


def _host_contention(ranks: dict[int, dict], members: list[int]) -> dict:
    cons = {r: evidence_of(ranks[r])["contention"] for r in members}
    n_local = max(
        [len(members)]
        + [int(c["local_world_size"]) for c in cons.values() if isinstance(c.get("local_world_size"), int)]
    )
    out: dict = {"ranks_on_host": n_local}
    masks = [m for r in members if isinstance(m := ranks[r].get("cpu_affinity"), list) and m]
    usable: int | None
    if len(masks) == len(members):
        usable = len(set().union(*map(set, masks)))
    else:
        counts = [c.get("affinity_cpus") for c in cons.values() if isinstance(c.get("affinity_cpus"), int)]
        usable = max(counts) if counts else None
    if usable:
        out["cpus_per_rank"] = usable / n_local
        threads = [c.get("torch_threads") for c in cons.values() if isinstance(c.get("torch_threads"), int)]
        if threads:  # ranks that recorded nothing are assumed to run as many threads as the others
            out["threads_per_cpu"] = sum(threads) / len(threads) * n_local / usable
    busy, steal, own, loads = [], [], [], []
    for c in cons.values():
        reading = _host_reading(c)
        if reading is None:
            continue
        total, idle = reading
        host = c.get("host") or {}
        busy.append(max(0.0, total - idle) / total)
        st = as_number(host.get("steal_s"))
        steal.append(None if st is None else max(0.0, st) / total)
        pcpu = as_number(c.get("process_cpu_s"))
        own.append(None if pcpu is None else (pcpu + (as_number(c.get("children_cpu_s")) or 0.0)) / total)
        samples = [s for s in c.get("runnable_samples") or [] if isinstance(s, int)]
        cpus = c.get("host_cpus")
        if samples and isinstance(cpus, int) and cpus > 0:
            loads.append(sum(samples) / len(samples) / cpus)
    if busy:
        out["busy_share"] = median(busy)
        job = _job_outside_busy(cons)
        if job is not None:  # the job's whole process tree, measured in the same window as the host
            out["other_busy_share"] = job
        elif len(own) == n_local and all(x is not None for x in own):  # every rank on the host measured its own
            out["other_busy_share"] = min(1.0, max(0.0, median(busy) - sum(x for x in own if x is not None)))
        steal_known = [x for x in steal if x is not None]
        if len(steal_known) == len(steal):
            out["steal_share"] = median(steal_known)
    if loads:
        out["load_per_cpu"] = median(loads)
        tree = any(isinstance(c.get("job"), dict) and c["job"].get("outside_runnable_samples") for c in cons.values())
        other = _job_outside_runnable(cons) if tree else _other_runnable(cons)
        if other is not None:
            out["other_runnable_per_cpu"] = other
    procs = [c["job"].get("processes") for c in cons.values() if isinstance(c.get("job"), dict)]
    procs = [p for p in procs if isinstance(p, int) and p > 0]
    if procs:
        out["job_processes"] = max(procs)  # how many processes the job's tree held (quoted by the contention rule)
    return out


Z95 = 1.96  # a measured excess is its mean less 1.96 standard errors: the low end of its 95 % interval


def _job_outside_runnable(cons: dict[int, dict]) -> float | None:
    """Runnable tasks outside the job per CPU, from the rank(s) that sampled the job's whole process tree:
    each sample is the host's runnable count less the job's runnable threads read right after it.  The
    two readings are not simultaneous, so a sample errs by the threads that changed state in between
    (it can come out negative); what counts is the low end of the mean's 95 % interval over the window
    (floored at 0): a busy job's own threads flickering between the readings, or one or two readings in
    a short window, measure no contention.  None with fewer than 3 readings; the median over such ranks."""
    lows = []
    for c in cons.values():
        job = c.get("job")
        samples = [s for s in (job or {}).get("outside_runnable_samples") or [] if isinstance(s, int)]
        if len(samples) >= 3 and isinstance(c.get("host_cpus"), int) and c["host_cpus"] > 0:
            mean = sum(samples) / len(samples)
            se = stdev(samples) / len(samples) ** 0.5
            lows.append(max(0.0, mean - Z95 * se) / c["host_cpus"])
    return median(lows) if lows else None


# /proc/stat counts CPU time in ticks (USER_HZ, 1/100 s on Linux) on every CPU, and each end of a window
# rounds: a share of the host's CPU time is good to about 2 ticks over the window's
# length, whatever the CPU count.  A window shorter than this many ticks cannot measure a share to
# 5 % (a rank that failed 15 ms into its window read "100 % busy" from 2 ticks): its host reading, and its
# context-switch rate, are not used: with 2 CPUs, five steps of under 40 ms measure no host share (the contention
# rule stays quiet on what it cannot measure).
MIN_TICKS_PER_CPU = 20


def _host_reading(c: dict) -> tuple[float, float] | None:
    """This rank's /proc/stat reading of the host (total, idle CPU seconds), when its window is long enough to
    measure a share of the host; else None."""
    host = c.get("host") or {}
    total, idle = as_number(host.get("total_s")), as_number(host.get("idle_s"))
    n = c.get("host_cpus")
    cpus = n if isinstance(n, int) and n > 0 else 1
    if not total or total / cpus < MIN_TICKS_PER_CPU * PROC_TICK_S or idle is None:
        return None
    return total, idle


def _job_outside_busy(cons: dict[int, dict]) -> float | None:
    """The host's CPU time that went outside the job's whole process tree, as a share of the host's CPU
    time: each rank that measured the tree subtracts it from ITS OWN host reading of the same window
    (another rank's window can be shorter, e.g. cut short by a failure: mixing them compares different
    seconds); the median over such ranks, within [0, 1]."""
    shares = []
    for c in cons.values():
        cpu = as_number((c.get("job") or {}).get("cpu_s"))
        reading = _host_reading(c)
        if cpu is None or reading is None:
            continue
        total, idle = reading
        shares.append(min(1.0, max(0.0, (total - idle - cpu) / total)))
    return median(shares) if shares else None


def _other_runnable(cons: dict[int, dict]) -> float | None:
    """Runnable tasks outside the job per CPU: the host's runnable count (median over ranks of each
    rank's mean) less every rank's own runnable threads and loader workers (their means, summed);
    None unless every rank on the host counted its own."""
    total: list[float] = []
    own, cpus = 0.0, 1  # cpus: set by every rank counted (used only when one was)
    for c in cons.values():
        samples = [s for s in c.get("runnable_samples") or [] if isinstance(s, int)]
        mine = [s for s in c.get("own_runnable_samples") or [] if isinstance(s, int)]
        if not samples or not mine or not isinstance(c.get("host_cpus"), int) or c["host_cpus"] <= 0:
            return None
        total.append(sum(samples) / len(samples))
        own += sum(mine) / len(mine)
        cpus = c["host_cpus"]
    return max(0.0, median(total) - own) / cpus if total else None


def contention_facts(ranks: dict[int, dict]) -> dict:
    facts: dict = {}
    hosts = _host_groups(ranks)
    if not hosts:
        return facts
    per_host = {h: _host_contention(ranks, m) for h, m in hosts.items()}
    rank_host = {r: h for h, m in hosts.items() for r in m}
    with_cpus = [h for h in per_host if "cpus_per_rank" in per_host[h]]
    if with_cpus:
        busiest = min(with_cpus, key=lambda h: (per_host[h]["cpus_per_rank"], -per_host[h].get("threads_per_cpu", 0)))
        for key in ("cpus_per_rank", "threads_per_cpu"):
            if key in per_host[busiest]:
                put_fact(
                    facts,
                    f"host.contention.{key}",
                    _round(per_host[busiest][key]),
                    {r: _round(per_host[h][key]) for r, h in rank_host.items() if key in per_host[h]},
                )
    for key in ("other_busy_share", "load_per_cpu", "steal_share", "other_runnable_per_cpu", "job_processes"):
        vals = {h: per_host[h][key] for h in per_host if key in per_host[h]}
        if vals:
            put_fact(
                facts,
                f"host.contention.{key}",
                _round(max(vals.values())),
                {r: _round(vals[h]) for r, h in rank_host.items() if h in vals},
            )
    switches = {}
    for r in sorted(rank_host):
        c = evidence_of(ranks[r])["contention"]
        th, wall = c.get("thread") or {}, as_number(c.get("wall_s"))
        if isinstance(th.get("nivcsw"), (int, float)) and wall and wall > 0 and _host_reading(c) is not None:
            switches[r] = round(th["nivcsw"] / wall, 2)
    if switches:
        put_fact(facts, "host.contention.involuntary_switches_per_s", max(switches.values()), switches)
    return facts


# ------------------------------------------------------------------ stack samples


def _stacks(d: dict) -> dict:
    st = evidence_of(d).get("stacks")
    return st if isinstance(st, dict) else {}


def _model_pass(func) -> bool:
    """A user function that is a module's forward (or a backward): every rank runs it; more time
    there on one rank means more work per step on that rank, which the compute fixes address."""
    name = str(func or "").rsplit(".", 1)[-1]
    return name in ("forward", "backward", "_call_impl", "__call__")


def _optimizer_step(where) -> bool:
    """The place is the optimizer's step (or zero_grad): every rank runs it each step; one rank being
    slower there is the same work done slower (its host or device), not work of its own."""
    call = str(where or "").split(" in ", 1)[0]
    return call.startswith("torch.optim.") or call.endswith((".zero_grad", "optimizer.step"))


def _waits_for_workers(where) -> bool:
    """The place is the DataLoader's own iterator: with worker processes, the training thread there only
    waits for (and unpickles) batches the workers make; a rank that spends longer there is late in its
    DataLoader wait (the trace's column, the loader's facts), not doing work of its own."""
    return str(where or "").split(" in ", 1)[0].startswith("torch.utils.data.dataloader.")


def _has_workers(d: dict) -> bool:
    dl = d.get("dataloader")
    return isinstance(dl, dict) and isinstance(dl.get("num_workers"), int) and dl["num_workers"] > 0


def extra_work(sampled: dict[int, dict], params: dict, loader_workers: AbstractSet[int] = frozenset()) -> dict | None:
    """The rank that spends materially more time in one user function (waits for peers
    excluded) than the median of the other ranks, or None.  Materially: the excess reaches
    ``extra_work_min_share`` of the median step and ``extra_work_min_samples`` samples, and
    the rank's time there is at least ``extra_work_min_ratio`` times the others' median.
    Significantly: the sampler's counts are Poisson, so an excess of samples is real only when it
    stands out of their counting noise at the 95 % level corrected for every (rank, function) pair
    compared (Bonferroni): with a few steps, a few samples more on one rank are chance."""
    if len(sampled) < 2:
        return None
    places: dict[int, dict[tuple, dict]] = {
        r: {(f.get("func"), f.get("file")): f for f in st.get("functions") or [] if isinstance(f, dict)}
        for r, st in sampled.items()
    }
    step_ms = median(as_number(st.get("step_ms")) or 0.0 for st in sampled.values())
    if step_ms <= 0:
        return None
    candidates = []
    for r, mine in places.items():
        ms_per_sample = as_number(sampled[r].get("ms_per_sample")) or 0.0
        steps = as_number(sampled[r].get("steps")) or 1.0
        for key, f in mine.items():
            if is_tool_frame(key[1]):
                continue  # ddpdoctor's own code (the capture agent): never the user's place
            if _model_pass(key[0]) or _optimizer_step(f.get("where")):
                continue  # the model's own forward/backward/optimizer step: every rank runs it
            if r in loader_workers and _waits_for_workers(f.get("where")):
                continue  # waiting for its DataLoader workers: the loader's time, not the rank's work
            ms = as_number(f.get("ms_per_step")) or 0.0
            others = median(as_number(places[o].get(key, {}).get("ms_per_step")) or 0.0 for o in places if o != r)
            excess = ms - others
            n_mine = ms * steps / ms_per_sample if ms_per_sample > 0 else 0.0
            n_others = others * steps / ms_per_sample if ms_per_sample > 0 else 0.0
            candidates.append((r, key, f, ms, others, excess, n_mine, n_others))
    z_crit = NormalDist().inv_cdf(1 - 0.05 / (2 * max(1, len(candidates))))
    best: dict[str, Any] | None = None
    for r, key, f, ms, others, excess, n_mine, n_others in candidates:
        excess_samples = n_mine - n_others
        if (
            excess >= params["extra_work_min_share"] * step_ms
            and excess_samples >= params["extra_work_min_samples"]
            and ms >= params["extra_work_min_ratio"] * others
            and excess_samples >= z_crit * (n_mine + n_others) ** 0.5
        ):
            if best is None or excess > best["ms_per_step"]:
                best = {
                    "rank": r,
                    "where": safe_where(_where_in(sampled[r], key, f.get("where"))),
                    "ms_per_step": round(excess, 3),
                    "share": round(excess / step_ms, 4),
                }
    return best


def _where_in(st: dict, key: tuple, where) -> str | None:
    """A function's place: its most sampled line, and when that line holds under two thirds of the
    function's samples, the runner-up with its share, e.g. ``save_checkpoint (train.py:29; 40 % of it
    in torch.save at line 28)``: the rename after a save can outweigh the save, and naming only one
    line would hide the other."""
    lines = sorted(
        (
            s
            for s in st.get("signatures") or []
            if isinstance(s, dict)
            and not s.get("sync")
            and (s.get("func"), s.get("file")) == key
            and isinstance(s.get("count"), (int, float))
        ),
        key=lambda s: -s["count"],
    )
    total = sum(s["count"] for s in lines)
    if len(lines) < 2 or total <= 0 or lines[0]["count"] >= 2 / 3 * total or not isinstance(where, str):
        return where
    second = lines[1]
    at = f"in {second['lib']} at line {second.get('line')}" if second.get("lib") else f"at line {second.get('line')}"
    tail = f"{round(100 * second['count'] / total)} % of it {at}"
    return f"{where[:-1]}; {tail})" if where.endswith(")") else f"{where} ({tail})"


def python_facts(ranks: dict[int, dict], params: dict) -> dict:
    facts: dict = {}
    recorded = {r: _stacks(d) for r, d in ranks.items() if _stacks(d)}
    if not recorded:
        return facts
    sampled_flag = {r: bool(st.get("sampled")) for r, st in sorted(recorded.items())}
    put_fact(facts, "python.sampled", all(sampled_flag.values()), sampled_flag)
    sampled = {r: st for r, st in recorded.items() if st.get("sampled")}
    found = extra_work(sampled, params, {r for r in sampled if _has_workers(ranks[r])})
    if found:
        for k, v in found.items():
            facts[f"python.extra_work.{k}"] = v
    inputs = {
        r: st["input"]
        for r, st in sorted(sampled.items())
        if isinstance(st.get("input"), dict) and as_number(st["input"].get("ms_per_step")) is not None
    }
    if inputs:
        ms = {r: float(i["ms_per_step"]) for r, i in inputs.items()}  # a number: as_number above
        # the input work EVERY rank does (the least of the ranks): what one rank does beyond that is
        # that rank's extra work (python.extra_work: the straggler rule), not the pipeline's
        med = min(ms.values())
        put_fact(facts, "python.input_work.ms_per_step", round(med, 3), ms)
        step_ms = median(as_number(sampled[r].get("step_ms")) or 0.0 for r in inputs)
        if step_ms > 0:
            put_fact(facts, "python.input_work.share", round(med / step_ms, 4))
        totals: dict[str, float] = {}
        for i in inputs.values():
            for t in i.get("top") or []:
                if isinstance(t, dict) and isinstance(t.get("where"), str):
                    totals[t["where"]] = totals.get(t["where"], 0.0) + (as_number(t.get("ms_per_step")) or 0.0)
        if totals:
            put_fact(facts, "python.input_work.where", safe_where(max(sorted(totals), key=lambda w: totals[w])))
    return facts


# ------------------------------------------------------------------ batch fingerprints


def data_facts(ranks: dict[int, dict]) -> dict:
    facts: dict = {}
    fps, shard = {}, {}
    for r in sorted(ranks):
        dl = ranks[r].get("dataloader")
        if not isinstance(dl, dict):
            continue
        if "sharded_by" in dl and (dl["sharded_by"] is None or isinstance(dl["sharded_by"], str)):
            shard[r] = dl["sharded_by"]
        got = dl.get("batch_fingerprints")
        if isinstance(got, list) and got and all(isinstance(x, str) for x in got):
            fps[r] = got
    if len(fps) >= 2:
        k = min(len(v) for v in fps.values())
        facts["data.same_first_batches"] = len({tuple(v[:k]) for v in fps.values()}) == 1
    named = {r: s for r, s in shard.items() if s}
    if named:
        put_fact(facts, "data.sharded_by", safe_where(named[min(named)]), shard if len(named) != len(shard) else named)
    return facts


def evidence_facts(ranks: dict[int, dict], params: dict) -> dict:
    from .gil_evidence import gc_facts, gil_facts  # GC pauses and GIL-held time (imports this module)

    facts = contention_facts(ranks)
    facts.update(python_facts(ranks, params))
    sampled = {r: st for r, d in ranks.items() if (st := _stacks(d)) and st.get("sampled")}
    facts.update(loop_collective_facts(sampled))
    facts.update(gc_facts(ranks, params))
    facts.update(gil_facts(ranks, params))
    facts.update(data_facts(ranks))
    return facts
