"""The bundle's manifest at the end of `ddpdoctor run` (or of a capture switched on from the environment):
how the run ended, which ranks recorded a trace, and in words why some did not; and the host facts the
ranks know better than the launcher."""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from pathlib import Path


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def utc_now() -> tuple[float, str]:
    t = time.time()
    return t, _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")


def read_rank_settings(out: Path) -> dict[int, dict]:
    found = {}
    for p in sorted((out / "ranks").glob("rank*/settings.json")):
        try:
            d = json.loads(p.read_text())
            found[int(d.get("rank", p.parent.name[4:]))] = d
        except (OSError, ValueError, TypeError):
            continue
    return found


def finish_bundle(out: Path, manifest: dict, host: dict, exit_code: int, interrupted: str | None) -> dict:
    for marker in (out / "ranks").glob("rank*/.window_done"):  # the ranks' coordination markers
        try:
            marker.unlink()
        except OSError:
            pass
    settings = read_rank_settings(out)
    rank_dirs = sorted(int(p.name[4:]) for p in (out / "ranks").glob("rank*") if p.name[4:].isdigit())
    traces = sorted(r for r in rank_dirs if (out / "ranks" / f"rank{r}" / f"rank{r}.pt.trace.json.gz").is_file())
    world = max([s.get("world_size") or 0 for s in settings.values()] + [len(rank_dirs)]) or None
    windows_complete = bool(settings) and all((s.get("window") or {}).get("complete") for s in settings.values())
    # ranks this node should hold: all of them, or the local ones when the job spans nodes
    nnodes = max([s.get("nnodes") or 1 for s in settings.values()] + [1])
    expected = world
    if nnodes > 1:
        expected = max([s.get("local_world_size") or 0 for s in settings.values()] + [0]) or None
    recorded = bool(expected and len(traces) == expected and windows_complete)
    # every rank's own record says its program ended with exit code 0: a non-zero exit came after it, from
    # a process that died in the interpreter's teardown; the training and the recording are whole
    ended = bool(settings) and all(((s.get("exit") or {}).get("code")) == 0 for s in settings.values())
    died_after_end = exit_code != 0 and not interrupted and recorded and ended
    if interrupted:  # interrupted after every window was recorded: the bundle is whole
        status = "complete" if recorded else "partial"
    elif exit_code != 0 and not died_after_end:
        status = "failed"
    else:
        status = "complete" if recorded else "partial"
    torch_versions = sorted({s["torch_version"] for s in settings.values() if s.get("torch_version")})
    nccl = sorted({s["nccl_version"] for s in settings.values() if s.get("nccl_version")})
    t, iso = utc_now()
    manifest.update(
        {
            "end_time": iso,
            "end_unix": t,
            "duration_s": round(t - manifest["start_unix"], 3),
            "status": status,
            "exit_code": exit_code,
            "interrupted_by": interrupted,
            "world_size": world,
            "ranks_present": traces,
            "ranks_seen": rank_dirs,
            "ranks_expected_here": expected,
            "steps_completed": {str(r): s.get("steps_completed") for r, s in sorted(settings.items())},
            "windows_complete": windows_complete,
            "flight_recorder_files": sorted(p.name for p in (out / "flight_recorder").iterdir())
            if (out / "flight_recorder").is_dir()
            else [],
        }
    )
    if torch_versions:
        manifest["torch_version"] = torch_versions[0] if len(torch_versions) == 1 else torch_versions
    manifest["launcher"] = launcher_of(settings)
    manifest["notes"] = bundle_notes(manifest.get("argv") or [], rank_dirs, traces, world, settings)
    manifest["died_after_program_end"] = died_after_end
    if died_after_end:
        manifest["notes"].append(
            f"the job exited with code {exit_code} after every rank's program had ended with exit code 0: a "
            "process died in the interpreter's teardown; the recording is complete"
        )
    # host facts the ranks know better than the launcher
    local = [s for s in settings.values() if s.get("hostname") == host.get("hostname")] or list(settings.values())
    if local:
        lws = max((s.get("local_world_size") or 0) for s in local) or len(local)
        host["local_world_size"] = lws
        union = set()
        for s in local:
            union.update(s.get("cpu_affinity") or [])
        host["rank_cpu_affinity"] = {str(s["rank"]): len(s.get("cpu_affinity") or []) for s in local}
        host["cpus_per_local_rank"] = round(len(union) / lws, 2) if union and lws else None
        nn = [s.get("nnodes") for s in local if s.get("nnodes")]
        if nn:
            host["nnodes"] = max(nn)
        host["node_rank"] = next((s.get("node_rank") for s in local if s.get("node_rank") is not None), None)
    if nccl:
        host["nccl_version"] = nccl[0]
    if torch_versions:
        host["torch_version"] = torch_versions[0]
    manifest["nnodes"] = host.get("nnodes") or _int(host.get("nnodes_arg"))
    return manifest


_PROCESS_COUNT_FLAGS = (
    "--num_processes",
    "--num-processes",
    "--nproc_per_node",
    "--nproc-per-node",
    "-np",
    "-n",
    "--ntasks",
    "--num_gpus",
    "--num-gpus",
)


def requested_processes(argv: list[str]) -> int | None:
    """How many processes the launcher on the command line was asked to start on this node
    (accelerate --num_processes, torchrun --nproc_per_node, mpirun -np, srun -n, deepspeed --num_gpus)."""
    for i, a in enumerate(argv):
        if a == "--":
            break
        flag, _, val = a.partition("=")
        if flag in _PROCESS_COUNT_FLAGS:
            if not val and i + 1 < len(argv):
                val = argv[i + 1]
            try:
                return int(val)
            except ValueError:
                return None
    return None


def launcher_of(settings: dict) -> str | None:
    """The launcher the ranks name (rank 0's when they differ), None when no rank recorded."""
    names = [s.get("launcher") for _r, s in sorted(settings.items()) if s.get("launcher")]
    return names[0] if names else None


NEVER_JOINED = (
    "no process joined a process group: no process of the command called torch.distributed.init_process_group "
    "(a rank is recorded from the moment it joins one)"
)


def never_joined(settings: dict) -> bool:
    """Every recorded process ran without joining a process group and without a training step (a job whose
    ranks never started, or a script that never trains)."""
    return bool(settings) and all(
        s.get("process_groups_joined") == 0 and not s.get("steps_completed") for s in settings.values()
    )


def bundle_notes(
    argv: list[str], rank_dirs: list[int], traces: list[int], world: int | None, settings: dict
) -> list[str]:
    """Why the bundle holds fewer ranks or traces than the command suggests, in words."""
    notes = []
    asked = requested_processes(argv)
    if not rank_dirs:
        notes.append(f"{NEVER_JOINED}, and the command's own process was not Python; see launcher.log")
    elif never_joined(settings):
        notes.append(f"{NEVER_JOINED}, and the command's own process ran no training step; see launcher.log")
        return notes
    elif asked and world is not None and world < asked:
        what = (
            "`accelerate launch --cpu` runs the script as one process whatever --num_processes says; "
            "`accelerate launch --multi_gpu --num_processes N` starts N ranks (gloo on CPU)"
            if "accelerate" in " ".join(argv[:2]) and "--cpu" in argv
            else "see launcher.log"
        )
        notes.append(f"the command asked for {asked} processes but {world} rank{'' if world == 1 else 's'} ran: {what}")
    again = {r: s for r, s in sorted(settings.items()) if (s.get("process_groups_joined") or 0) > 1}
    if again:
        groups = {s.get("window_process_group") for s in again.values()}
        where = (
            "the recorded window belongs to the first group"
            if groups == {1}
            else f"the recorded window belongs to group {groups.pop()} (counted from 1)"
            if len(groups) == 1 and None not in groups
            else "no window was recorded in any group"
            if groups == {None}
            else "the ranks recorded their windows in different groups"
        )
        who = f"rank {next(iter(again))}" if len(again) == 1 else f"ranks {', '.join(map(str, again))}"
        notes.append(f"{who} joined a process group again after destroy_process_group: {where}")
    untraced = [r for r in rank_dirs if r not in traces]
    for r in untraced:
        s = settings.get(r) or {}
        steps = s.get("steps_completed")
        warm = (s.get("window") or {}).get("warmup")
        if s.get("user_profiler"):
            why = "the script runs its own torch.profiler"
        elif not steps:
            why = "no training step was seen (no torch.optim optimizer step and no DDP forward)"
        elif ((s.get("window") or {}).get("steady") or {}).get("decided_by") == "waiting":  # issue 37
            why = f"training ended after {plural(steps, 'optimizer step')}, waiting for the loader's prefetched batches"
        elif warm is not None and steps <= warm:
            why = f"training ended after {plural(steps, 'optimizer step')}, before the window (--warmup {warm})"
        elif (s.get("exit") or {}).get("reason"):
            why = f"it ended ({s['exit']['reason']}) before its window was complete"
        else:
            why = "it left no record of how it ended (killed, or it crashed)"
        notes.append(f"rank {r} recorded no trace: {why}")
    return notes


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None
