"""Per-rank stage: a :class:`RankTrace` becomes a compact :class:`RankSummary`.

The summary holds one row of column values per step and the list of collectives (for
cross-rank matching).  It is small enough to send between processes; raw events never
leave the worker that decoded them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..trace.classify import host_collective_kind
from ..trace.decode import GpuOps, RankTrace, Spans
from ..trace.messages import CollMessages
from . import intervals as iv
from .collective_groups import collective_group_extras, launch_times
from .columns import COLUMNS, CROSS_RANK, GPU_ONLY, PARTITION_CPU, PARTITION_GPU
from .op_overhead import op_overhead_extras, param_map_extras
from .phases import optimizer_class, optimizer_steps, phase_extras
from .steps import ACTIVITY_SPAN, OPTIMIZER_STEP, StepWindow, step_windows

HOST_COLLECTIVE_PREFIXES = ("gloo:", "mpi:", "ucc:")


@dataclass
class Collectives:
    """One record per collective operation of a rank, in time order."""

    step: np.ndarray  # index into the rank's steps
    kind: list[str]
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return int(self.start.size)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start


@dataclass
class RankSummary:
    rank: int
    paths: list[str]
    world_size: int | None
    backend: str | None
    devices: list[str]
    host: str | None
    pid: int | None
    schema: str
    device_kind: str  # "gpu" or "cpu"
    comm_source: str  # "kernels", "host annotations" or "none"
    step_source: str
    steps: list[StepWindow]
    values: dict[str, list[float | None]]  # column -> one value per step (µs)
    collectives: Collectives
    notes: list[str] = field(default_factory=list)
    n_events: int = 0
    extras: dict[str, float | None] = field(default_factory=dict)  # per-rank scalars, see _extras
    input_shapes: list[str | None] = field(default_factory=list)  # per step: shapes the forward received
    timeline: dict | None = None  # the median-duration step's segments and top kernels, see _timeline
    decoder: str = ""  # the trace reader that ran (RankTrace.decoder)
    optimizer_class: str | None = None  # the optimizer whose step the trace shows ("Adam"), see phases.py


def _union(sp: Spans) -> iv.Intervals:
    return iv.union(sp.start, sp.end)


def summarize(rt: RankTrace, rank: int) -> RankSummary:
    windows, source = step_windows(rt)
    notes: list[str] = []
    if source == OPTIMIZER_STEP:
        notes.append("no ProfilerStep# annotations: steps are the intervals between Optimizer.step ends")
    elif source == ACTIVITY_SPAN:
        notes.append("no ProfilerStep# annotations: the whole span of activity is treated as one step")
    ws = np.array([w.start for w in windows])
    we = np.array([w.end for w in windows])
    gpu = rt.gpu
    has_gpu = gpu.start.size > 0

    def m(x: iv.Intervals) -> np.ndarray:
        return iv.measure_in_windows(x, ws, we)

    kernels = gpu.kind == GpuOps.KERNEL
    comm_k = gpu.kind == GpuOps.COMM
    copies = (gpu.kind == GpuOps.MEMCPY) | (gpu.kind == GpuOps.MEMSET)
    host_coll = _host_collectives(rt.host_collectives)
    if comm_k.any():
        comm_set, comm_source = iv.union(gpu.start[comm_k], gpu.end[comm_k]), "kernels"
    elif len(host_coll):
        comm_set, comm_source = _union(host_coll), "host annotations"
    else:
        comm_set, comm_source = iv.EMPTY, "none"
    dl = _union(rt.dataloader)
    step_time = we - ws
    values: dict[str, np.ndarray | None] = {"step_time": step_time}
    values["forward"] = m(_union(rt.forward)) if len(rt.forward) else None
    values["backward"] = m(_union(rt.backward)) if len(rt.backward) else None
    values["optimizer"] = m(_union(rt.optimizer)) if len(rt.optimizer) else None
    values["comm"] = m(comm_set)

    if has_gpu:
        k = iv.union(gpu.start[kernels], gpu.end[kernels])
        cp = iv.union(gpu.start[copies], gpu.end[copies])
        busy = iv.merge(k, comm_set, cp)
        values["gpu_busy"] = m(busy)
        values["compute"] = m(k)
        values["comm_exposed"] = m(iv.difference(comm_set, k))
        values["memcpy"] = m(iv.difference(cp, iv.merge(k, comm_set)))
        dl_wait = iv.difference(dl, busy)
        values["dataloader_wait"] = m(dl_wait)
        values["host_idle"] = m(iv.difference(iv.difference(_union(rt.host_ops), busy), dl))
        partition = PARTITION_GPU
        segs = {
            "compute": k,
            "comm_exposed": iv.difference(comm_set, k),
            "memcpy": iv.difference(cp, iv.merge(k, comm_set)),
            "dataloader_wait": dl_wait,
            "host_idle": iv.difference(iv.difference(_union(rt.host_ops), busy), dl),
        }
    else:
        main = _union(rt.main_ops)
        values["compute"] = m(iv.difference(main, dl))
        values["comm_exposed"] = m(iv.difference(comm_set, iv.merge(main, dl)))
        values["dataloader_wait"] = m(dl)
        for col in GPU_ONLY:
            values[col] = None
        partition = PARTITION_CPU
        segs = {
            "compute": iv.difference(main, dl),
            "comm_exposed": iv.difference(comm_set, iv.merge(main, dl)),
            "dataloader_wait": dl,
        }
        notes.append("CPU-only trace: GPU columns are empty; compute is training-thread operator time")
    known = sum(values[c] for c in partition if c != "other")
    values["other"] = np.clip(step_time - known, 0.0, None)
    for col in CROSS_RANK:
        values[col] = None
    if has_gpu and not comm_k.any() and len(host_coll):
        notes.append("no communication kernels: communication taken from host-side collective annotations")

    coll = _collectives(gpu, comm_k, host_coll, ws, we, comm_source)
    extras = _extras(gpu, kernels, coll, ws, we) if has_gpu else {"collectives_per_step": _per_step(len(coll), ws)}
    if not has_gpu:
        extras.update(op_overhead_extras(rt.main_ops, iv.merge(dl, optimizer_steps(rt)), ws, we))
        extras.update(param_map_extras(rt.main_ops, ws, we))
    if has_gpu and ws.size:
        total = float(np.sum(step_time))
        extras["alloc_share"] = float(np.sum(m(_union(rt.runtime_alloc)))) / total if total > 0 else None
        extras["sync_share"] = float(np.sum(m(_union(rt.runtime_sync)))) / total if total > 0 else None
    if rt.steps:  # the records are host events: count them in the host's ProfilerStep spans
        host_ws, host_we = np.asarray([s for _, s, _ in rt.steps]), np.asarray([e for _, _, e in rt.steps])
    else:
        host_ws, host_we = ws, we
    extras.update(_message_extras(rt.coll_messages, host_ws, host_we))
    extras.update(_group_extras(rt, comm_k, host_coll, comm_source, segs["comm_exposed"], (ws, we, host_ws, host_we)))
    extras["dataloader_single_process"] = _single_process_loader(rt.dataloader.names)
    extras.update(phase_extras(rt, host_ws, host_we, _union(host_coll)))
    timeline = _timeline(windows, step_time, segs, gpu, kernels | comm_k)
    rows = {c: (None if values[c] is None else [float(v) for v in values[c]]) for c in COLUMNS}
    return RankSummary(
        rank=rank,
        paths=[rt.path],
        world_size=rt.world_size,
        backend=rt.backend,
        devices=rt.devices,
        host=rt.host,
        pid=rt.pid,
        schema=rt.schema,
        device_kind="gpu" if has_gpu else "cpu",
        comm_source=comm_source,
        step_source=source,
        steps=windows,
        values={c: (v if v is not None else [None] * len(windows)) for c, v in rows.items()},
        collectives=coll,
        notes=notes,
        n_events=rt.n_events,
        extras=extras,
        input_shapes=_step_inputs(rt.forward_inputs, ws, we),
        timeline=timeline,
        optimizer_class=optimizer_class(rt.optimizer),
    )


MAX_SEGMENTS = 40  # per category in the representative step's timeline
TOP_KERNELS = 8


def _clip(x: iv.Intervals, lo: float, hi: float, max_pieces: int) -> list[list[float]]:
    """Pieces of ``x`` inside [lo, hi), relative to lo, the smallest gaps closed until at most
    ``max_pieces`` remain (the timeline plot cannot show more anyway)."""
    x = iv.intersection(x, iv.Intervals(np.array([lo]), np.array([hi])))
    s, e = x.starts, x.ends
    if s.size > max_pieces:
        gaps = s[1:] - e[:-1]
        keep = np.sort(np.argsort(gaps, kind="stable")[-(max_pieces - 1) :])
        s = np.concatenate([s[:1], s[1:][keep]])
        e = np.concatenate([e[:-1][keep], e[-1:]])
    return [[round(float(a - lo), 1), round(float(b - lo), 1)] for a, b in zip(s, e)]


def _timeline(windows: list[StepWindow], step_time, segs: dict, gpu: GpuOps, device_ops) -> dict | None:
    """The median-duration step of this rank: segments per category (µs from the step start;
    whatever no category covers is idle) and its most expensive kernels."""
    if not windows:
        return None
    i = int(np.argsort(step_time, kind="stable")[(len(windows) - 1) // 2])
    w = windows[i]
    out = {
        "step": w.name,
        "step_number": w.number,
        "duration_us": round(float(w.end - w.start), 1),
        "segments": {c: _clip(x, w.start, w.end, MAX_SEGMENTS) for c, x in segs.items()},
        "top_kernels": [],
    }
    if gpu.names is not None and gpu.start.size:
        sel = np.flatnonzero(device_ops & (gpu.start >= w.start) & (gpu.start < w.end))
        dur = gpu.end[sel] - gpu.start[sel]
        agg: dict[str, list] = {}
        for j, d in zip(sel.tolist(), dur.tolist()):
            a = agg.setdefault(gpu.names[j], [0.0, 0, gpu.kind[j] == GpuOps.COMM])
            a[0] += d
            a[1] += 1
        top = sorted(agg.items(), key=lambda kv: -kv[1][0])[:TOP_KERNELS]
        out["top_kernels"] = [
            {"name": n[:300], "us": round(v[0], 1), "count": v[1], "comm": bool(v[2])} for n, v in top
        ]
    return out


def _step_inputs(forward_inputs: list[tuple[float, str]], ws: np.ndarray, we: np.ndarray) -> list[str | None]:
    """The input shapes of the first forward pass that starts in each step window."""
    out: list[str | None] = [None] * ws.size
    for start, dims in forward_inputs:
        i = int(np.searchsorted(ws, start, side="right")) - 1
        if 0 <= i < ws.size and start < we[i] and out[i] is None:
            out[i] = dims
    return out


def _single_process_loader(names: list[str]) -> float | None:
    """1.0 when the DataLoader iterator is the single-process one (num_workers=0), 0.0 when it
    is the multi-process one, None when the trace shows no DataLoader."""
    single = sum("_SingleProcessDataLoaderIter" in n for n in names)
    multi = sum("_MultiProcessingDataLoaderIter" in n for n in names)
    if not single and not multi:
        return None
    return 1.0 if single >= multi else 0.0


def _per_step(count: float, ws: np.ndarray) -> float | None:
    return float(count) / ws.size if ws.size else None


def _extras(gpu: GpuOps, kernels: np.ndarray, coll: Collectives, ws, we) -> dict[str, float | None]:
    """Per-rank facts for the rules: kernel counts and sizes, pageable host-to-device copies."""
    if not ws.size:
        return {}
    inside = np.zeros(gpu.start.size, dtype=bool)
    step = np.searchsorted(ws, gpu.start, side="right") - 1
    ok = step >= 0
    inside[ok] = gpu.start[ok] < we[step[ok]]
    k = kernels & inside
    dur = gpu.end - gpu.start
    copies = (gpu.kind == GpuOps.MEMCPY) & inside
    pageable = copies & (gpu.pageable_h2d if gpu.pageable_h2d is not None else np.zeros_like(copies))
    total = float(np.sum(we - ws))
    traits = gpu.traits if gpu.traits is not None else np.zeros(gpu.start.size, dtype=np.int8)
    kdur = float(dur[k].sum())

    def trait_share(bit: int) -> float | None:
        return float(dur[k & ((traits & bit) != 0)].sum()) / kdur if kdur > 0 else None

    from ..trace.classify import TRAIT_CONV, TRAIT_FP8, TRAIT_LOWP, TRAIT_NHWC

    conv = trait_share(TRAIT_CONV)
    nhwc = float(dur[k & ((traits & TRAIT_CONV) != 0) & ((traits & TRAIT_NHWC) != 0)].sum())
    conv_time = float(dur[k & ((traits & TRAIT_CONV) != 0)].sum())
    return {
        "lowp_kernel_share": trait_share(TRAIT_LOWP),
        "fp8_kernel_share": trait_share(TRAIT_FP8),
        "conv_kernel_share": conv,
        "nhwc_conv_share": nhwc / conv_time if conv_time > 0 else None,
        "kernels_per_step": _per_step(int(k.sum()), ws),
        "kernel_median_us": float(np.median(dur[k])) if k.any() else None,
        "small_kernel_fraction": float(np.mean(dur[k] < 10.0)) if k.any() else None,
        "collectives_per_step": _per_step(len(coll), ws),
        "h2d_pageable_us_per_step": float(dur[pageable].sum()) / ws.size,
        "h2d_pageable_share": float(dur[pageable].sum()) / total if total > 0 else None,
        "memcpy_count_per_step": _per_step(int(copies.sum()), ws),
    }


def _message_extras(msgs: CollMessages, ws: np.ndarray, we: np.ndarray) -> dict[str, float]:
    """All-reduce bytes and messages per step from the collective records that carry their size
    (DDP's gradient buckets on a trace with no ``ddpdoctor run`` settings beside it), the steps given
    in host time (``ws``/``we``: sorted, not overlapping)."""
    if not len(msgs) or not ws.size:
        return {}
    step = np.searchsorted(ws, msgs.start, side="right") - 1
    inside = step >= 0
    inside[inside] = msgs.start[inside] < we[step[inside]]
    sel = inside & np.asarray([k == "all_reduce" for k in msgs.kind], dtype=bool)
    if not sel.any():
        return {}
    nbytes, elem = msgs.nbytes[sel], msgs.elem_bytes[sel]
    return {
        "allreduce_bytes_per_step": float(nbytes.sum()) / ws.size,
        "allreduce_msgs_per_step": float(sel.sum()) / ws.size,
        # the element size that carries most of the bytes: 2 when gradients already travel in 16 bits
        "allreduce_elem_bytes": _weighted_median(elem, nbytes) if nbytes.sum() > 0 else float(np.median(elem)),
    }


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, cum[-1] / 2.0)])


def _group_extras(rt: RankTrace, comm_k, host_coll: Spans, comm_source: str, exposed: iv.Intervals, windows) -> dict:
    """collective_groups' extras: the backend's collective records (communication kernels, else the
    gloo:/mpi:/ucc: annotations) with their kinds, and the c10d:: calls that issued them."""
    gpu = rt.gpu
    if comm_source == "kernels":
        # a kernel was issued when the host launched it: the launch call with its correlation id
        # (the kernel's own start trails the host by the queue ahead of it)
        idx = np.flatnonzero(comm_k)
        lib = Spans(gpu.start[idx], gpu.end[idx], [])
        lib_kinds = [gpu.comm_kind[i] for i in idx]
        issued = launch_times(gpu.correlation[idx], rt.runtime_corr, rt.runtime_launch.start)
    else:
        lib = host_coll
        lib_kinds = [host_collective_kind(n) or "comm" for n in host_coll.names]
        issued = None
    ws, we, host_ws, host_we = windows
    api = _api_calls(rt.host_collectives)
    return collective_group_extras(
        lib, lib_kinds, api, rt.forward, rt.backward, exposed, rt.coll_messages, ws, we, host_ws, host_we, issued
    )


def _api_calls(sp: Spans) -> Spans:
    """The ``c10d::`` calls among the host collective spans (where the training thread issued each)."""
    keep = [i for i, n in enumerate(sp.names) if n.startswith("c10d::")]
    return Spans(sp.start[keep], sp.end[keep], [sp.names[i] for i in keep])


def _host_collectives(sp: Spans) -> Spans:
    from ..trace.classify import library_kinds_from_api

    keep = [i for i, n in enumerate(sp.names) if n.startswith(HOST_COLLECTIVE_PREFIXES)]
    names = [sp.names[i] for i in keep]
    # gloo:all_reduce issued by c10d::_reduce_scatter_base_ is a reduce-scatter (see classify)
    api = sorted((sp.start[i], n) for i, n in enumerate(sp.names) if n.startswith("c10d::"))
    order = sorted(range(len(keep)), key=lambda j: sp.start[keep[j]])
    kinds = library_kinds_from_api([n for _, n in api], names)
    if kinds is not None:
        for j, kind in zip(order, kinds):
            names[j] = f"{names[j].split(':', 1)[0]}:{kind}"
    return Spans(sp.start[keep], sp.end[keep], names)


def _collectives(gpu: GpuOps, comm_k: np.ndarray, host_coll: Spans, ws, we, source: str) -> Collectives:
    if source == "kernels":
        idx = np.flatnonzero(comm_k)
        start, end = gpu.start[idx], gpu.end[idx]
        kind = [gpu.comm_kind[i] for i in idx]
    elif source == "host annotations":
        start, end = host_coll.start, host_coll.end
        kind = [host_collective_kind(n) or "comm" for n in host_coll.names]
    else:
        return Collectives(np.empty(0, dtype=np.int32), [], np.empty(0), np.empty(0))
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    kind = [kind[i] for i in order]
    # a collective belongs to the step window it starts in
    step = np.searchsorted(ws, start, side="right") - 1
    ok = (step >= 0) & (start < we[np.clip(step, 0, None)]) if ws.size else np.zeros(start.size, bool)
    keep = np.flatnonzero(ok)
    return Collectives(step[keep].astype(np.int32), [kind[i] for i in keep], start[keep], end[keep])
