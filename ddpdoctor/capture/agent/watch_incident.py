"""Part of the capture agent (standard library only): the files of ``ddpdoctor run --watch`` (issue 38).

- a trigger: ``DIR/watch/trigger-NNN.json``, created once (``O_EXCL``) by the first rank that asks for incident
  NNN; it names the step S at which every rank records, how many steps, and why;
- an incident: ``DIR/incidents/NNN-step<S>-<kind>/``, a bundle ``ddpdoctor analyze`` reads like any other
  (``manifest.json``, ``ranks/rank<R>/`` with the trace and ``settings.json``; for a hang every rank's stacks
  and its hang record instead of a trace);
- ``DIR/watch.json`` (schema ``ddpdoctor.watch/1``), rebuilt from every rank's ``watch-state.json`` by each
  rank as it ends (the last one to end leaves the whole picture).
"""

from __future__ import annotations

import json
import os
import shutil
import time

WATCH_SCHEMA = "ddpdoctor.watch/1"
STATE_FILE = "watch-state.json"
STEPS_FILE = "watch-steps.jsonl"


def trigger_path(bundle: str, n: int) -> str:
    return os.path.join(bundle, "watch", f"trigger-{n:03d}.json")


def incident_name(trigger: dict) -> str:
    return f"{trigger['n']:03d}-step{trigger['step']}-{trigger['kind']}"


def incident_dir(bundle: str, trigger: dict) -> str:
    return os.path.join(bundle, "incidents", incident_name(trigger))


def read_trigger(bundle: str, n: int) -> dict | None:
    """Trigger NNN if it exists and is whole (a half-written one is read again at the next check)."""
    try:
        with open(trigger_path(bundle, n), encoding="utf-8") as fh:
            d = json.load(fh)
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and isinstance(d.get("step"), int) and d.get("kind") else None


def create_trigger(bundle: str, trigger: dict) -> bool:
    """Write trigger NNN unless another rank already did (then False: follow that one)."""
    path = trigger_path(bundle, trigger["n"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(trigger, fh)
    try:
        os.link(tmp, path)  # atomic and exclusive: readers never see half a trigger
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def rank_dir(bundle: str, trigger: dict, rank: int) -> str:
    d = os.path.join(incident_dir(bundle, trigger), "ranks", f"rank{rank}")
    os.makedirs(d, exist_ok=True)
    return d


def file_window(agent, trigger: dict) -> str:
    """After a recorded window: this rank's trace and settings into the incident's bundle."""
    dest = rank_dir(agent.bundle, trigger, agent.rank)
    trace = os.path.join(agent.dir, agent.profiler.trace_name)
    if os.path.exists(trace):
        os.replace(trace, os.path.join(dest, agent.profiler.trace_name))
    for name in ("settings.json",):
        src = os.path.join(agent.dir, name)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(dest, name))
    write_manifest(agent, trigger)
    return dest


def dump_hang(agent, trigger: dict) -> str:
    """A hang: every thread's Python stack (faulthandler, from this watcher thread), the hang watcher's record
    (its states, the collective the main thread waits in) and the settings as cached."""
    import faulthandler

    dest = rank_dir(agent.bundle, trigger, agent.rank)
    with open(os.path.join(dest, "stacks.txt"), "w", encoding="utf-8") as fh:
        faulthandler.dump_traceback(fh, all_threads=True)
    hang = agent.ending.hang
    if hang is not None:  # its record now, as it stands (it keeps updating the bundle's own copy)
        if hang.states:
            hang._write(time.time())
        src = hang.out_path
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(dest, "hang_dump.jsonl"))
    try:
        agent.settings.write(lite=True)
        shutil.copyfile(os.path.join(agent.dir, "settings.json"), os.path.join(dest, "settings.json"))
    except Exception as exc:  # the stacks are what matters here
        agent.internal_error("watch hang settings", exc)
    write_manifest(agent, trigger, hang=True)
    return dest


def file_failure(agent, trigger: dict) -> str:
    """The failing rank's own records (its log holds the traceback) into the incident."""
    dest = rank_dir(agent.bundle, trigger, agent.rank)
    try:
        agent.settings.write()  # the main thread, at its exit hook: the whole record, its exception included
    except Exception:
        agent.settings.write(lite=True)
    for name in ("settings.json", "events.jsonl", "output.log"):
        src = os.path.join(agent.dir, name)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(dest, name))
    write_manifest(agent, trigger, hang=True)
    return dest


def write_manifest(agent, trigger: dict, hang: bool = False) -> None:
    """The incident's manifest from the run's own (when there is one yet) and what is in the folder now; each
    rank rewrites it after filing its part, so the last one names every rank."""
    root = incident_dir(agent.bundle, trigger)
    base: dict = {}
    try:
        with open(os.path.join(agent.bundle, "manifest.json"), encoding="utf-8") as fh:
            base = json.load(fh)
    except (OSError, ValueError):
        base = {}
    ranks_dir = os.path.join(root, "ranks")
    seen = sorted(int(n[4:]) for n in os.listdir(ranks_dir) if n.startswith("rank") and n[4:].isdigit())
    traces = [r for r in seen if os.path.exists(os.path.join(ranks_dir, f"rank{r}", f"rank{r}.pt.trace.json.gz"))]
    present = seen if hang else traces
    world = agent.world_size
    why = trigger.get("why") or trigger["kind"]
    base.update(
        {
            "schema": base.get("schema", "ddpdoctor.manifest/1"),
            "capture_version": base.get("capture_version", 2),
            "status": "failed" if hang else ("complete" if len(present) >= world else "partial"),
            "exit_code": None if hang else 0,
            "world_size": world,
            "ranks_present": traces,
            "ranks_seen": seen,
            "ranks_expected_here": base.get("ranks_expected_here") or world,
            "windows_complete": not hang and len(traces) >= world,
            "step_window": {"warmup": trigger["step"], "active": trigger.get("steps"), "keep_going": True},
            "watch_incident": {k: trigger.get(k) for k in ("n", "kind", "step", "steps", "rank", "why")},
            "notes": [f"recorded by ddpdoctor run --watch at step {trigger['step']}: {why}"],
        }
    )
    path = os.path.join(root, "manifest.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(base, fh, indent=1, default=str)
    os.replace(tmp, path)


def write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def write_state(agent, state: dict) -> None:
    path = os.path.join(agent.dir, STATE_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh, default=str)
    os.replace(tmp, path)


def write_summary(bundle: str) -> dict:
    """``DIR/watch.json`` from every rank's ``watch-state.json`` and the triggers (schema ddpdoctor.watch/1)."""
    states: dict[int, dict] = {}
    ranks_root = os.path.join(bundle, "ranks")
    for name in sorted(os.listdir(ranks_root)) if os.path.isdir(ranks_root) else []:
        try:
            with open(os.path.join(ranks_root, name, STATE_FILE), encoding="utf-8") as fh:
                d = json.load(fh)
            states[int(d["rank"])] = d
        except (OSError, ValueError, KeyError, TypeError):
            continue
    incidents, not_recorded = [], []
    n = 1
    while (t := read_trigger(bundle, n)) is not None:
        ranks = sorted(r for r, s in states.items() if n in (s.get("filed") or []))
        (incidents if ranks else not_recorded).append(
            {
                "n": n,
                "step": t["step"],
                "kind": t["kind"],
                "onset_step": t.get("onset_step", t["step"]),  # where the change began (a hang: its step)
                "ranks": ranks,
                "raised_by_rank": t.get("rank"),
                "why": t.get("why"),
                "path": os.path.join("incidents", incident_name(t)),
            }
        )
        n += 1
    overhead = [s["overhead_per_step_s"] for s in states.values() if s.get("overhead_per_step_s") is not None]
    data = {
        "schema": WATCH_SCHEMA,
        "incidents": incidents,
        "not_recorded": not_recorded,  # triggers no rank filed (the job ended before their step)
        "steps_seen": {str(r): s.get("steps") for r, s in sorted(states.items())},
        # slowdowns other processes explained (run-queue wait): no incident, said
        "contention": {str(r): s["contention"] for r, s in sorted(states.items()) if s.get("contention")},
        "baseline": {str(r): s.get("baseline") for r, s in sorted(states.items())},
        "overhead": {
            "per_step_s": max(overhead) if overhead else None,
            "share_of_step": max((s.get("overhead_share") or 0.0) for s in states.values()) if states else None,
            "how": "the watch's own time at each step boundary (its per-step record, detector, trigger check "
            "and flushes), timed with perf_counter inside the ranks; incidents' recordings not counted",
        },
        "world_size": max((s.get("world_size") or 0) for s in states.values()) if states else None,
    }
    path = os.path.join(bundle, "watch.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)
    return data
