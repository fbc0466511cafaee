"""Facts recorded by `ddpdoctor run` (manifest, host files, per-rank settings) as one flat
dict of dotted names, for the rule engine's conditions and fix templates.

``load_bundle_facts(paths)`` searches every given path (one bundle, several node folders,
or a folder holding them) for ``manifest.json``, ``hosts/*.json`` and
``ranks/rank<R>/settings.json``.  A fact is absent when nothing recorded it.  When ranks
disagree, the value of the lowest rank is used and ``<name>.per_rank`` = {rank: value}
is added.  Pure Python: no torch.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import safe_io
from ..capture.agent import contract
from ..errors import InputError
from ..resources import metric_defaults
from .compile import compile_facts
from .events import load_events, problem_events
from .evidence import evidence_facts
from .inputs import walk
from .job_config import job_config_facts
from .loader import dataset_facts, loader_facts
from .loader_cpus import cpu_demand_facts
from .loader_workers import loader_worker_facts

MANIFEST_SCHEMA = contract.MANIFEST_SCHEMA
HOST_SCHEMA = contract.HOST_SCHEMA
SETTINGS_SCHEMA = contract.SETTINGS_SCHEMA  # settings.json as the agent writes it (capture/agent/contract.py)

# fact name -> path inside settings.json (each step declared in contract.SETTINGS_FIELDS / SETTINGS_RECORDS)
_DATALOADER = (
    "num_workers",
    "pin_memory",
    "batch_size",
    "persistent_workers",
    "prefetch_factor",
    "sampler",
    "drop_last",
    "dataset_len",
    "set_epoch_called",
    "iterations",
)
_DDP = (
    "bucket_cap_mb",
    "find_unused_parameters",
    "gradient_as_bucket_view",
    "static_graph",
    "comm_hook",
    "param_count",
    "param_tensors",
    "grad_bytes",
    "num_buckets",
    "bucket_sizes_bytes",
    "unused_parameter_count",
    "broadcast_buffers",
    "buffer_bytes",
)
_RANK_FACTS: dict[str, tuple[str, ...]] = {
    **{f"config.dataloader.{k}": ("dataloader", k) for k in _DATALOADER},
    **{f"config.ddp.{k}": ("ddp", k) for k in _DDP},
    "config.ddp.used": ("ddp", "used"),
    "config.optimizer": ("optimizer", "type"),
    "config.mixed_precision": ("precision", "mixed_precision"),
    "config.compiled": ("compiled",),
    "config.tf32": ("precision", "tf32"),
    # frameworks branch: the loop's framework, gradient accumulation, data sharding, FSDP
    "run.framework": ("framework",),
    "run.torch_version": ("torch_version",),
    "train.micro_batches_per_step": ("train", "micro_batches_per_step"),
    "train.synced_micro_batches_per_step": ("train", "synced_micro_batches_per_step"),
    "data.sharded_by": ("dataloader", "sharded_by"),
    **{
        f"config.fsdp.{k}": ("fsdp", k)
        for k in (
            "kind",
            "sharding_strategy",
            "auto_wrap_policy",
            "backward_prefetch",
            "forward_prefetch",
            "reshard_after_forward",
            "wrapped_modules",
        )
    },
}


def _read_json(path: Path) -> dict | None:
    try:
        data = safe_io.load_json(safe_io.read_capped(path, safe_io.max_member_bytes()), str(path))
    except (OSError, InputError):
        return None
    return data if isinstance(data, dict) else None


def find_bundle_files(paths: list[str], inputs=None) -> tuple[list[Path], list[Path], list[Path]]:
    """(manifests, host files, settings files) under the given files or folders."""
    manifests, hosts, settings = [], [], []
    seen = set()

    def consider(p: Path) -> None:
        key = p.resolve()
        if key in seen:
            return
        seen.add(key)
        if p.name == "manifest.json":
            manifests.append(p)
        elif p.name == "settings.json":
            settings.append(p)
        elif p.suffix == ".json" and p.parent.name == "hosts":
            hosts.append(p)

    for raw in paths:
        p = Path(raw)
        if p.is_file():
            consider(p)
        elif p.is_dir():
            for root, _dirs, files in walk(p, inputs):
                for name in files:
                    if name.endswith(".json"):
                        consider(Path(root) / name)
    return manifests, hosts, settings


def _get(d: dict, path: tuple[str, ...]):
    cur = d
    for k in path:
        if not isinstance(cur, dict) or k not in cur:
            return _MISSING
        cur = cur[k]
    return cur


_MISSING = object()


def _same(values: list) -> bool:
    first = json.dumps(values[0], sort_keys=True, default=str)
    return all(json.dumps(v, sort_keys=True, default=str) == first for v in values[1:])


def _put_ranked(facts: dict, name: str, per_rank: dict[int, object]) -> None:
    if not per_rank:
        return
    ranks = sorted(per_rank)
    facts[name] = per_rank[ranks[0]]
    if len(ranks) > 1 and not _same([per_rank[r] for r in ranks]):
        facts[f"{name}.per_rank"] = {r: per_rank[r] for r in ranks}


def _batches_per_epoch(d: dict) -> int | None:
    """Batches one pass over the rank's main loader yields before it starts the next epoch.

    len(loader) as recorded (bundles from before it was recorded: dataset_len / batch_size, divided by
    the world size when something shards the data: `sharded_by`, or in older bundles a Distributed*
    sampler). A loop that leaves each epoch early (`if i == N: break`) restarts the loader sooner than
    its length says: when the loader was iterated more than once, the batches seen per iteration bound
    it too (the count includes each pass's closing next() call, so it errs long, never short)."""
    dl = d.get("dataloader")
    if not isinstance(dl, dict):
        return None
    n = dl.get("batches_per_epoch")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        n = None
        size, bs = dl.get("dataset_len"), dl.get("batch_size")
        if isinstance(size, int) and isinstance(bs, int) and size > 0 and bs > 0:
            sharded = dl["sharded_by"] if "sharded_by" in dl else "Distributed" in str(dl.get("sampler") or "")
            world = d.get("world_size") if sharded else 1
            per_rank = -(-size // world) if isinstance(world, int) and world > 0 else size
            n = per_rank // bs if dl.get("drop_last") else -(-per_rank // bs)
            n = n if n > 0 else None
    its, seen = dl.get("iterations"), dl.get("batches")
    if isinstance(its, int) and isinstance(seen, int) and its >= 2 and seen > 0:
        observed = -(-seen // its)
        n = observed if n is None else min(n, observed)
    return n


def _memory_facts(ranks: dict[int, dict], facts: dict) -> None:
    """The peak memory of the window (its rank) and each rank's capacity."""
    peaks = {}
    caps = {}
    for r, d in ranks.items():
        mem = d.get("memory") or {}
        peak = mem.get("peak_reserved_bytes", mem.get("peak_allocated_bytes"))
        if peak is not None:
            peaks[r] = peak
        if mem.get("capacity_bytes") is not None:
            caps[r] = mem["capacity_bytes"]
    if peaks:
        peak_rank = max(sorted(peaks), key=lambda r: peaks[r])
        facts["memory.peak_bytes"] = peaks[peak_rank]
        facts["memory.peak_rank"] = peak_rank
        if len(peaks) > 1:
            facts["memory.peak_bytes.per_rank"] = dict(sorted(peaks.items()))
    if caps:
        _put_ranked(facts, "memory.capacity_bytes", caps)


def _host_facts(hosts: list[dict], facts: dict) -> None:
    """What the first host (by name) reports: CPUs, GPUs, interfaces, /dev/shm, NVLink, InfiniBand."""
    hosts.sort(key=lambda h: str(h.get("hostname")))
    h0 = hosts[0]
    facts["host.hostnames"] = list(dict.fromkeys(h.get("hostname") for h in hosts))
    cpu = h0.get("cpu") or {}
    if cpu.get("cpu_count") is not None:
        facts["host.cpu_count"] = cpu["cpu_count"]
    for key in ("cpus_per_local_rank", "local_world_size"):
        if h0.get(key) is not None:
            facts[f"host.{key}"] = h0[key]
    gpus = h0.get("gpus") or []
    facts["host.gpu_count"] = len(gpus)
    if gpus:
        facts["host.gpu_model"] = gpus[0].get("name")
        if gpus[0].get("memory_bytes") is not None:
            facts["host.gpu_memory_bytes"] = gpus[0]["memory_bytes"]
    if h0.get("memory_bytes") is not None:
        facts["host.memory_bytes"] = h0["memory_bytes"]
    facts["host.interfaces"] = [i.get("name") for i in h0.get("interfaces") or [] if i.get("name")]
    shm = h0.get("shm") or {}
    if shm.get("total_bytes") is not None:
        facts["host.shm_bytes"] = shm["total_bytes"]
    if h0.get("nvlink") is not None:
        facts["host.nvlink"] = h0["nvlink"]
    facts["host.ib_devices"] = list(h0.get("ib_devices") or [])


def load_bundle_facts(paths: list[str], inputs=None, thresholds: dict | None = None) -> dict[str, object]:
    manifests, host_files, settings_files = find_bundle_files(paths, inputs)
    facts: dict[str, object] = {}
    ranks: dict[int, dict] = {}
    rank_dirs: dict[int, Path] = {}  # the folder of each rank's settings.json (its DataLoader workers' records)
    for p in settings_files:
        d = _read_json(p)
        if not d or d.get("schema") != SETTINGS_SCHEMA:
            continue
        try:
            r = int(d["rank"])
        except (KeyError, TypeError, ValueError):
            continue
        ranks.setdefault(r, d)
        rank_dirs.setdefault(r, p.parent)
    mans = [m for m in (_read_json(p) for p in manifests) if m and m.get("schema") == MANIFEST_SCHEMA]
    hosts = [h for h in (_read_json(p) for p in host_files) if h and h.get("schema") == HOST_SCHEMA]

    # ---- per-rank configuration
    for name, path in _RANK_FACTS.items():
        per = {}
        for r, d in ranks.items():
            v = _get(d, path)
            if v is _MISSING:
                continue
            if name == "config.tf32" and v is None:
                continue
            if v is None and name.startswith(("run.framework", "train.", "data.", "config.fsdp.")):
                continue
            if name.startswith("config.ddp.") and name != "config.ddp.used" and not (d.get("ddp") or {}).get("used"):
                continue
            if name.startswith("config.dataloader.") and not d.get("dataloader"):
                continue
            if name == "config.optimizer" and v is None:
                continue
            per[r] = v
        _put_ranked(facts, name, per)
    _put_ranked(
        facts,
        "config.dataloader.batches_per_epoch",
        {r: n for r, d in ranks.items() if (n := _batches_per_epoch(d)) is not None},
    )
    # passes over the main loader that ended (next() calls that returned no batch: StopIteration)
    _put_ranked(
        facts,
        "data.passes_finished",
        {
            r: dl["batches"] - dl["returned"]
            for r, d in ranks.items()
            if isinstance(dl := d.get("dataloader"), dict)
            and isinstance(dl.get("returned"), int)
            and isinstance(dl.get("batches"), int)
        },
    )

    _memory_facts(ranks, facts)

    # ---- errors the capture agent swallowed (settings.json agent_errors): a gap in what was recorded
    errs = {r: lst for r, d in ranks.items() if isinstance(lst := d.get("agent_errors"), list)}
    if errs:
        facts["capture.agent_errors"] = sum(
            int(e.get("count") or 0) for lst in errs.values() for e in lst if isinstance(e, dict)
        )
        facts["capture.agent_error_places"] = sorted(
            {
                f"rank {r}: {e.get('place')}"
                for r, lst in errs.items()
                for e in lst
                if isinstance(e, dict) and e.get("place")
            }
        )

    # ---- window evidence: host contention, Python stack samples, batch fingerprints (bundle/evidence.py)
    evidence_params = (thresholds or metric_defaults())["evidence"]  # the analysis's metrics.toml
    facts.update(evidence_facts(ranks, evidence_params))
    facts.update(job_config_facts(ranks))  # anomaly mode, float64 parameters, init_process_group's world size
    facts.update(compile_facts(ranks))  # torch.compile compilations in the window (bundle/compile.py)
    # the DataLoader's window: waiting or computing (bundle/loader.py)
    facts.update(loader_facts(ranks, evidence_params))
    facts.update(loader_worker_facts(rank_dirs, ranks, evidence_params))  # inside the workers (loader_workers.py)
    facts.update(cpu_demand_facts(ranks))  # the CPUs the job's processes wanted against its host's (loader_cpus.py)
    facts.update(dataset_facts(ranks))  # what one epoch covers on each rank, and of which data (missing sampler)

    if hosts:
        _host_facts(hosts, facts)
    nnodes = [n for rec in (*mans, *hosts, *ranks.values()) if (n := rec.get("nnodes"))]
    if nnodes:
        facts["host.nnodes"] = max(nnodes)
    elif hosts or mans:
        facts["host.nnodes"] = max(len(hosts), len(mans))

    _run_facts(mans, ranks, facts)
    # extra: the problems the ranks saw, in time order (the first is the likely root cause)
    roots = sorted({str(p.parent.parent.parent) for p in settings_files} | {str(p.parent) for p in manifests})
    problems = problem_events(load_events(roots)) if roots else []
    if problems:
        keep = ("time", "rank", "kind", "step", "type", "message", "caught", "signal", "thread")
        listed = [{k: e[k] for k in keep if k in e} for e in problems[:20]]
        facts["run.problems"] = listed
        facts["run.first_problem"] = listed[0]
    return facts


def _run_facts(mans: list[dict], ranks: dict[int, dict], facts: dict[str, object]) -> None:
    """The run.* facts of the manifests and the ranks' settings: status, exit, window, world, ranks present."""
    if mans or ranks:
        facts["run.captured"] = True
    worlds = [w for rec in (*mans, *ranks.values()) if (w := rec.get("world_size"))]
    present: set[int] = set()
    for m in mans:
        present.update(int(r) for r in m.get("ranks_present") or [])
    for d in ranks.values():
        if (d.get("window") or {}).get("trace"):
            present.add(int(d["rank"]))
    if mans:
        statuses = [m.get("status") for m in mans]
        status = (
            "failed" if "failed" in statuses else "partial" if any(s != "complete" for s in statuses) else "complete"
        )
        if status == "complete" and worlds and len(present) < max(worlds):
            status = "partial"  # a node's bundle is missing
        elif (
            status == "partial"
            and worlds
            and len(present) >= max(worlds)
            and all(m.get("windows_complete") and not m.get("interrupted_by") and m.get("exit_code") == 0 for m in mans)
        ):
            status = "complete"  # per-node/per-task bundles that together hold every rank
        facts["run.status"] = status
        if any(m.get("run_id") and not m.get("end_time") and m.get("exit_code") is None for m in mans):
            facts["run.unfinished"] = True  # `ddpdoctor run` never finished its bundle: it was killed (or still runs)
        stopped_by = next((m["interrupted_by"] for m in mans if m.get("interrupted_by")), None)
        if stopped_by:  # ddpdoctor run forwarded a SIGINT/SIGTERM/SIGHUP to the job
            facts["run.interrupted_by"] = stopped_by
            steps = [s for m in mans for s in (m.get("steps_completed") or {}).values() if isinstance(s, int)]
            if steps:
                facts["run.interrupted_at_step"] = max(steps)
        codes = [m.get("exit_code") for m in mans if m.get("exit_code") is not None]
        if codes:
            facts["run.exit_code"] = next((c for c in codes if c != 0), 0)
        m0 = sorted(mans, key=lambda m: str(m.get("hostname")))[0]
        win = m0.get("step_window") or {}
        if "warmup" in win:
            facts["run.warmup_steps"] = win["warmup"]
        if "active" in win:
            facts["run.active_steps"] = win["active"]
        if m0.get("command"):
            facts["run.command"] = m0["command"]
        if m0.get("launcher"):
            facts["run.launcher"] = m0["launcher"]
    if worlds:
        facts["run.world_size"] = max(worlds)
    if mans or ranks:
        facts["run.ranks_present"] = sorted(present)
    _steady_facts(ranks, facts)
    if ranks:
        facts["run.steps_completed.per_rank"] = {r: ranks[r].get("steps_completed") for r in sorted(ranks)}


def _steady_facts(ranks: dict[int, dict], facts: dict[str, object]) -> None:
    """run.window.steady_*: what decided the recorded window's start (issue 37), from the lowest rank that
    recorded it (the decision is the same on every rank of a job whose ranks build the same loader)."""
    st = next(
        (
            (ranks[r].get("window") or {}).get("steady")
            for r in sorted(ranks)
            if (ranks[r].get("window") or {}).get("steady")
        ),
        None,
    )
    if not isinstance(st, dict) or not isinstance(st.get("from_step"), int):
        return
    how, step, pre = st.get("decided_by"), st["from_step"], st.get("prefetched_batches")
    facts["run.window.steady_from_step"] = step
    facts["run.window.steady_decided_by"] = how
    if isinstance(pre, int):
        facts["run.window.prefetched_batches"] = pre
    if how == "prefetch_used" and (st.get("waited_steps") or 0) > 0:
        facts["run.window.steady_note"] = (
            f"steady from step {step}: the loader's {pre} prefetched batches were used up "
            f"(--warmup {st.get('warmup')} alone would have started at step {st.get('warmup')})"
        )
    elif how == "bound":
        facts["run.window.steady_note"] = (
            f"not steady after {step} steps: the loader's {pre} prefetched batches were not used up "
            f"({st.get('returned_batches')} returned); recorded from step {step}, the bound "
            f"(--steady-within {st.get('steady_within')}: steps past --warmup)"
        )
