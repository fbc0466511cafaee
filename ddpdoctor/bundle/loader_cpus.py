"""How many CPUs the job's own processes wanted over the profiled window, against the CPUs its host gives
them (``host.job_cpus_wanted``, ``host.usable_cpus``, ``loader.workers_cpus_wanted``,
``loader.workers_runqueue_share``), from each rank's ``settings.json``: ``loader_window`` (the DataLoader
workers' CPU time and run-queue wait, capture/agent/loader.py) and ``evidence.contention`` (the training
process's own CPU time).  Pure Python, no torch.

A task that is runnable, on a CPU or waiting for one, wants a CPU: over a window of W seconds, its CPU time
plus its run-queue wait (schedstat), over W, is the CPUs it wanted on average.  That holds whatever else runs
on the host (a CPU-bound worker wants one CPU whether it gets it or not), so the sum over the job's processes
on a host against that host's CPUs says whether the job by itself asks for more CPUs than there are: four
workers that augment images on two cores do, four workers that sleep on storage do not.

- the workers: their CPU time plus their run-queue wait (every thread of every worker);
- the training processes: their CPU time only (their threads' run-queue wait is not recorded), so the job's
  demand is a lower bound: when it exceeds the CPUs, the job does.

Only hosts whose ranks ran DataLoader workers are measured (the mechanism these facts serve: the job's own
workers oversubscribing its CPUs); the host whose job wanted most CPUs per usable CPU speaks for the run.
"""

from __future__ import annotations

from .values import as_number, evidence_of, put_fact


def _rank_demand(d: dict) -> dict | None:
    """One rank's window: its workers' CPUs wanted, run-queue wait and wall time; its training process's CPUs."""
    rec = d.get("loader_window")
    if not isinstance(rec, dict):
        return None
    workers, wall = rec.get("num_workers"), as_number(rec.get("wall_s"))
    cpu, queue = as_number(rec.get("workers_cpu_s")), as_number(rec.get("workers_runqueue_s"))
    if not isinstance(workers, int) or isinstance(workers, bool) or workers <= 0 or not wall or wall <= 0:
        return None
    if cpu is None or queue is None:
        return None
    queue = max(0.0, queue)  # a worker that died in the window can leave a negative difference
    out = {"workers_cpus": (cpu + queue) / wall, "queue_s": queue, "workers_wall_s": workers * wall}
    con = evidence_of(d).get("contention") or {}
    pcpu, cwall = as_number(con.get("process_cpu_s")), as_number(con.get("wall_s"))
    if pcpu is not None and cwall and cwall > 0:
        out["training_cpus"] = pcpu / cwall
    return out


def _usable_cpus(members: list[dict]) -> int | None:
    """The CPUs the ranks of one host may run on: the union of their affinity masks, else the host's count."""
    masks = [m for d in members if isinstance(m := d.get("cpu_affinity"), list) and m]
    if masks and len(masks) == len(members):
        return len(set().union(*map(set, masks)))
    found = [
        c.get("affinity_cpus") or c.get("host_cpus")
        for d in members
        if isinstance(c := evidence_of(d).get("contention"), dict)
    ]
    counts = [n for n in found if isinstance(n, int) and not isinstance(n, bool) and n > 0]
    return max(counts) if counts else None


def training_runqueue(rec) -> float | None:
    """The training thread's run-queue wait outside ``next(loader)`` (inside it the thread mostly sleeps on the
    workers' queue, and that wait is the DataLoader wait already), as a share of the window."""
    if not isinstance(rec, dict):
        return None
    wall, queue = as_number(rec.get("wall_s")), as_number(rec.get("train_runqueue_s"))
    if not wall or wall <= 0 or queue is None:
        return None
    return min(1.0, max(0.0, queue - (as_number(rec.get("next_runqueue_s")) or 0.0)) / wall)


def cpu_demand_facts(ranks: dict[int, dict]) -> dict:
    """``train.runqueue_share`` (the mean over the ranks that recorded it); ``loader.workers_runqueue_share``
    (all ranks' workers, pooled) and, for the host whose job wanted most CPUs per usable CPU,
    ``host.job_cpus_wanted``, ``host.usable_cpus``, ``loader.workers_cpus_wanted`` (``.per_rank``: each rank's
    workers), absent without a rank whose workers were measured."""
    facts: dict = {}
    queued = {
        r: round(q, 4) for r in sorted(ranks) if (q := training_runqueue(ranks[r].get("loader_window"))) is not None
    }
    if queued:
        put_fact(facts, "train.runqueue_share", round(sum(queued.values()) / len(queued), 4), queued)
    per = {r: x for r in sorted(ranks) if (x := _rank_demand(ranks[r])) is not None}
    if not per:
        return facts
    shares = {r: round(x["queue_s"] / x["workers_wall_s"], 4) for r, x in per.items()}
    pooled = sum(x["queue_s"] for x in per.values()) / sum(x["workers_wall_s"] for x in per.values())
    put_fact(facts, "loader.workers_runqueue_share", round(pooled, 4), shares)
    hosts: dict[str, list[int]] = {}
    for r in sorted(ranks):
        hosts.setdefault(str(ranks[r].get("hostname")), []).append(r)
    best = None
    for members in hosts.values():
        measured = [r for r in members if r in per]
        usable = _usable_cpus([ranks[r] for r in members])
        if not measured or not usable:
            continue
        workers = sum(per[r]["workers_cpus"] for r in measured)
        job = workers + sum(per[r].get("training_cpus", 0.0) for r in measured)
        if best is None or job / usable > best[0] / best[1]:
            best = (job, usable, workers, measured)
    if best is not None:
        job, usable, workers, measured = best
        facts["host.job_cpus_wanted"] = round(job, 3)
        facts["host.usable_cpus"] = usable
        put_fact(
            facts,
            "loader.workers_cpus_wanted",
            round(workers, 3),
            {r: round(per[r]["workers_cpus"], 3) for r in measured},
        )
    return facts
