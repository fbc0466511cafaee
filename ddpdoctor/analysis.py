"""``analyze``: discovery → per-rank decode and breakdown (in parallel) → cross-rank metrics.

Each worker decodes one rank at a time and returns a compact RankSummary, so memory stays
near one rank's raw events per worker and the cross-rank stage never sees raw events.  The
workers are this process, local processes or a Dask cluster (executors.py).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import executors, sources
from .bundle.discover import Discovery, TraceFile, discover
from .bundle.hosts import HostIdentity, identify_hosts
from .errors import InputError, NoTracesError
from .metrics.breakdown import Collectives, RankSummary, summarize
from .metrics.columns import COLUMNS
from .metrics.cross_rank import CrossRank, analyze_cross_rank
from .trace.decode import load_rank_trace

IN_PROCESS_BYTES = 32 * 1024 * 1024  # below this total size a process pool costs more than it saves


@dataclass
class AnalyzeOptions:
    all_windows: bool = False
    jobs: int | None = None
    comm_patterns: tuple[str, ...] = ()
    hta: str = "auto"  # "auto", "on" or "off"
    scheduler: str | None = None  # a Dask scheduler address (tcp://host:8786): ranks run on that cluster
    ranks: str | None = None  # --ranks SPEC: analyze only these ranks, on purpose ("0-7,512")


@dataclass
class Analysis:
    inputs: list[str]
    discovery: Discovery
    summaries: list[RankSummary]
    cross: CrossRank
    warnings: list[str] = field(default_factory=list)
    hta: dict | None = None
    seconds: float = 0.0
    bytes_read: int = 0
    hosts: HostIdentity | None = None  # each rank's host and how it was known (bundle/hosts.py)

    @property
    def partial(self) -> bool:
        """True when some ranks of the job are missing, were skipped, or were left out on purpose (--ranks)."""
        world = self.discovery.world_size
        return (
            (world is not None and len(self.summaries) < world)
            or self.discovery.chosen is not None
            or any(w.startswith("skipped") for w in self.warnings)
        )

    def rank_share(self, s: RankSummary) -> dict[str, float | None]:
        """Mean share of step time of each column: column total / step-time total."""
        total = float(np.sum(s.values["step_time"]))
        out = {}
        for col in COLUMNS:
            vals = s.values[col]
            if not vals or vals[0] is None or total <= 0:
                out[col] = None
            else:
                out[col] = float(np.sum(vals)) / total
        return out

    def table(self):
        """The per-(rank, step) table as a pandas DataFrame (µs), one row per rank and step."""
        import pandas as pd

        rows = []
        for s in self.summaries:
            for i, w in enumerate(s.steps):
                row = {"rank": s.rank, "step": w.name, "step_number": w.number, "start_us": w.start}
                row.update({c: s.values[c][i] for c in COLUMNS})
                rows.append(row)
        return pd.DataFrame(rows, columns=["rank", "step", "step_number", "start_us", *COLUMNS])


def _process_rank(rank: int, files: list[TraceFile], comm_patterns: tuple[str, ...]) -> RankSummary:
    """Decode and summarize every window of one rank (all-windows mode) or the latest usable one."""
    parts: list[RankSummary] = []
    for f in files:
        rt = load_rank_trace(f.path, rank, f.rank_source, comm_patterns)
        parts.append(summarize(rt, rank))
        parts[-1].decoder = rt.decoder
    return parts[0] if len(parts) == 1 else _concat(parts)


def _usable(s: RankSummary) -> bool:
    return bool(s.steps) and s.n_events > len(s.steps) + 2


def _concat(parts: list[RankSummary]) -> RankSummary:
    parts = sorted(parts, key=lambda p: p.steps[0].start if p.steps else 0.0)
    pids = {p.pid for p in parts if p.pid is not None}
    if len(pids) > 1:
        raise InputError(
            f"rank {parts[0].rank} has traces from different runs (pids {sorted(pids)}): "
            + ", ".join(p.paths[0] for p in parts)
        )
    base = parts[0]
    offset = 0
    steps, step_idx, kinds, starts, ends, shapes = [], [], [], [], [], []
    values = {c: [] for c in COLUMNS}
    for p in parts:
        steps.extend(p.steps)
        shapes.extend(p.input_shapes or [None] * len(p.steps))
        for c in COLUMNS:
            values[c].extend(p.values[c])
        step_idx.append(p.collectives.step + offset)
        kinds.extend(p.collectives.kind)
        starts.append(p.collectives.start)
        ends.append(p.collectives.end)
        offset += len(p.steps)
    base.steps, base.values, base.input_shapes = steps, values, shapes
    # per-rank scalars (kernel sizes, shares of the step, …): step-weighted means over the windows
    keys = {k for p in parts for k in p.extras}
    base.extras = {}
    for k in keys:
        pairs = [(p.extras[k], len(p.steps)) for p in parts if p.extras.get(k) is not None and p.steps]
        total = sum(n for _, n in pairs)
        base.extras[k] = sum(v * n for v, n in pairs) / total if total else None
    base.collectives = Collectives(np.concatenate(step_idx), kinds, np.concatenate(starts), np.concatenate(ends))
    base.paths = [x for p in parts for x in p.paths]
    base.n_events = sum(p.n_events for p in parts)
    base.notes = sorted({n for p in parts for n in p.notes})
    base.decoder = "; ".join(sorted({p.decoder for p in parts}))
    return base


def _run_rank(rank: int, disc: Discovery, opts: AnalyzeOptions, warnings: list[str]) -> RankSummary:
    files = disc.by_rank[rank]
    summary = _process_rank(rank, files, opts.comm_patterns)
    if not opts.all_windows and not _usable(summary):
        # an empty trailing window (e.g. written when the profiler exits): use the latest earlier one
        for older in reversed(disc.skipped_windows.get(rank, [])):
            candidate = _process_rank(rank, [older], opts.comm_patterns)
            if _usable(candidate):
                warnings.append(
                    f"rank {rank}: latest trace {files[-1].path} holds no steps; used the earlier window {older.path}"
                )
                return candidate
    return summary


def _rank_slice(disc: Discovery, rank: int) -> Discovery:
    """The part of the discovery one rank's worker needs (not every rank's file list)."""
    return Discovery({rank: disc.by_rank[rank]}, {rank: disc.skipped_windows.get(rank, [])}, disc.world_size)


def _worker(args):
    rank, disc, opts = args
    warnings: list[str] = []
    try:
        return rank, _run_rank(rank, disc, opts, warnings), warnings, None
    except InputError as exc:
        return rank, None, warnings, str(exc)


def analyze(
    paths: list[str], opts: AnalyzeOptions | None = None, progress=None, inputs=None, thresholds: dict | None = None
) -> Analysis:
    opts = opts or AnalyzeOptions()
    t0 = time.perf_counter()
    disc = discover(paths, all_windows=opts.all_windows, inputs=inputs, ranks=opts.ranks)
    warnings = list(disc.warnings)
    ranks = disc.ranks
    total_bytes = sum(f.size for r in ranks for f in disc.by_rank[r])
    jobs = max(1, min(opts.jobs or os.cpu_count() or 1, len(ranks)))
    # each task carries only its own rank's files; big ranks first keeps every worker busy until the end
    tasks = sorted(
        ((r, _rank_slice(disc, r), opts) for r in ranks), key=lambda t: -sum(f.size for f in disc.by_rank[t[0]])
    )
    on_result = (lambda res: progress(res[0])) if progress else None
    if opts.scheduler:
        results = executors.dask_cluster(_worker, tasks, opts.scheduler, on_result)
    elif jobs == 1 or total_bytes < IN_PROCESS_BYTES:
        results = executors.in_process(_worker, sorted(tasks, key=lambda t: t[0]), on_result)
    else:
        results = executors.local_processes(_worker, tasks, jobs, on_result)
    summaries, errors, unread = [], [], []
    for rank, summary, warns, err in sorted(results, key=lambda r: r[0]):
        warnings.extend(warns)
        if err:
            errors.append(err)
            unread.append(rank)
        else:
            summaries.append(summary)
    if errors and not summaries:
        where = (
            (
                " (with --scheduler, the Dask workers open the files: give paths they can read, on a shared "
                "filesystem, or URLs)"
            )
            if opts.scheduler
            else ""
        )
        # not bad input as a whole: a failed run's logs are still read (diagnosis.run_analyze)
        raise NoTracesError(
            "no readable trace: "
            + (errors[0] if len(errors) == 1 else f"{errors[0]} (and {len(errors) - 1} more)")
            + where
            + "".join(f"; {w}" for w in disc.warnings if w.startswith("ignored"))
        )
    for rank, err in zip(unread, errors):
        warnings.append(
            f"skipped {err}: rank {rank} is left out of the step breakdown and of the comparison between ranks"
        )
    if not any(s.steps for s in summaries):
        raise NoTracesError("the traces hold no activity to analyze (no steps, no operators, no kernels)")
    # each rank's host (trace host_name > the trace handler's file name > node folder): the clocks are per host
    hosts = identify_hosts({s.rank: s.host for s in summaries}, disc, list(paths))
    for s in summaries:
        s.host = hosts.host.get(s.rank)
    cross = analyze_cross_rank(summaries, thresholds)  # the analysis's metrics.toml (default: as shipped)
    if hosts.note:  # said once: with what the end times suggest, when they do
        est = cross.clock
        if est is not None and est.suggested:
            cross.notes = [n for n in cross.notes if n not in est.notes]
        cross.notes.insert(
            0,
            hosts.note
            + (
                f", although collective end times suggest offsets between the ranks' clocks (largest: {est.suggested})"
                if est is not None and est.suggested
                else ""
            ),
        )
    return Analysis(
        inputs=[p if sources.is_url(p) else str(Path(p)) for p in paths],
        discovery=disc,
        summaries=summaries,
        cross=cross,
        warnings=warnings,
        seconds=time.perf_counter() - t0,
        bytes_read=total_bytes,
        hosts=hosts,
    )
