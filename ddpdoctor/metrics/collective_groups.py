"""Exposed communication per step split by WHICH collectives it is: DDP's buffer broadcast at the
start of the forward, the gradient all-reduce issued during backward, the all-reduces / broadcasts /
barriers the training loop issues itself elsewhere (metrics, a manual gradient loop), or any other
collective (point-to-point, all-to-all, all-gather, reduce-scatter outside backward: model or
sharded parallelism, not something to cut).

A collective's *group* comes from its kind and from where the training thread issued it: the
``c10d::`` call (``c10d::broadcast_`` inside ``DistributedDataParallel.forward`` is DDP's
``_sync_buffers``; ``c10d::allreduce_`` inside an ``autograd::engine::evaluate_function`` span is a
gradient bucket).  The backend's own records (``gloo:broadcast`` on a gloo worker thread, a NCCL
kernel) start later than the call that issued them, so they are paired with the calls in time order
when both sequences have the same length (as trace/classify.library_kinds_from_api does); when they
do not pair, the record's own start stands in for the call's.

Each group's exposed time is the part of its collectives that the step's exposed-communication set
(communication no compute or loader wait overlaps, computed by breakdown.summarize) covers; a
moment covered by collectives of two groups counts once, for the first group in ``GROUPS``.
"""

from __future__ import annotations

import numpy as np

from ..trace.classify import library_kinds_from_api
from ..trace.messages import CollMessages
from ..trace.model import Spans
from . import intervals as iv

FORWARD_BROADCAST, BACKWARD_ALLREDUCE = "forward_broadcast", "backward_allreduce"
LOOP_SYNC, OTHER = "loop_sync", "other_collective"
GROUPS = (FORWARD_BROADCAST, BACKWARD_ALLREDUCE, LOOP_SYNC, OTHER)
GRADIENT_KINDS = ("all_reduce", "reduce_scatter")
LOOP_SYNC_KINDS = ("all_reduce", "broadcast", "barrier", "reduce")


def _inside(t: np.ndarray, sp: Spans) -> np.ndarray:
    """bool per time in ``t``: it falls inside one of the spans ``sp``."""
    if not len(sp) or not t.size:
        return np.zeros(t.size, dtype=bool)
    u = iv.union(sp.start, sp.end)
    j = np.searchsorted(u.starts, t, side="right") - 1
    ok = j >= 0
    out = np.zeros(t.size, dtype=bool)
    out[ok] = t[ok] < u.ends[j[ok]]
    return out


def issue_times(lib_start: np.ndarray, api: Spans) -> np.ndarray:
    """When each backend record (``lib_start``, any order) was issued: the start of the ``c10d::``
    call paired with it in time order when both counts agree, else the record's own start."""
    if len(api) != lib_start.size or not lib_start.size:
        return lib_start.astype(np.float64, copy=True)
    out = np.empty(lib_start.size)
    out[np.argsort(lib_start, kind="stable")] = np.sort(api.start, kind="stable")
    return out


def launch_times(corr: np.ndarray, launch_corr: np.ndarray, launch_start: np.ndarray) -> np.ndarray:
    """The host start of the runtime call that launched each device op (by correlation id); NaN where
    no launch call carries the op's id."""
    out = np.full(corr.size, np.nan)
    if not corr.size or not launch_corr.size:
        return out
    order = np.argsort(launch_corr, kind="stable")
    keys = launch_corr[order]
    j = np.clip(np.searchsorted(keys, corr), 0, keys.size - 1)
    hit = (keys[j] == corr) & (corr >= 0)
    out[hit] = launch_start[order][j[hit]]
    return out


def group_of(kinds: list[str], issued: np.ndarray, forward: Spans, backward: Spans) -> list[str]:
    """The group of each collective from its canonical kind and its issue time."""
    in_fwd, in_bwd = _inside(issued, forward), _inside(issued, backward)
    out = []
    for k, f, b in zip(kinds, in_fwd.tolist(), in_bwd.tolist()):
        if k == "broadcast" and f:
            out.append(FORWARD_BROADCAST)
        elif k in GRADIENT_KINDS and b:
            out.append(BACKWARD_ALLREDUCE)
        elif k in LOOP_SYNC_KINDS:
            out.append(LOOP_SYNC)
        else:
            out.append(OTHER)
    return out


def exposed_by_group(
    start: np.ndarray, end: np.ndarray, groups: list[str], exposed: iv.Intervals, ws: np.ndarray, we: np.ndarray
) -> dict[str, float]:
    """µs per step of ``exposed`` covered by each group's collectives (``exposed_<group>_us_per_step``)."""
    out: dict[str, float] = {}
    if not ws.size:
        return out
    taken = iv.EMPTY
    g = np.asarray(groups, dtype=object)
    for name in GROUPS:
        sel = g == name if g.size else np.zeros(0, dtype=bool)
        mine = iv.union(start[sel], end[sel]) if sel.any() else iv.EMPTY
        part = iv.difference(iv.intersection(mine, exposed), taken)
        out[f"exposed_{name}_us_per_step"] = float(np.sum(iv.measure_in_windows(part, ws, we))) / ws.size
        taken = iv.merge(taken, part)
    return out


def forward_broadcast_messages(msgs: CollMessages, forward: Spans, ws: np.ndarray, we: np.ndarray) -> dict[str, float]:
    """Bytes and records per step of the sized broadcast records (``record_param_comms``) issued
    inside a forward span, the steps given in host time; nothing when no record carries its size."""
    if not len(msgs) or not ws.size:
        return {}
    step = np.searchsorted(ws, msgs.start, side="right") - 1
    ok = step >= 0
    ok[ok] = msgs.start[ok] < we[step[ok]]
    sel = ok & np.asarray([k == "broadcast" for k in msgs.kind], dtype=bool) & _inside(msgs.start, forward)
    if not sel.any():
        return {}
    return {
        "forward_broadcast_bytes_per_step": float(msgs.nbytes[sel].sum()) / ws.size,
        "forward_broadcast_msgs_per_step": float(sel.sum()) / ws.size,
    }


def collective_group_extras(
    lib: Spans,
    lib_kinds: list[str],
    api: Spans,
    forward: Spans,
    backward: Spans,
    exposed: iv.Intervals,
    msgs: CollMessages,
    ws: np.ndarray,
    we: np.ndarray,
    host_ws: np.ndarray,
    host_we: np.ndarray,
    issued: np.ndarray | None = None,
) -> dict[str, float]:
    """The per-rank extras of this module: exposed µs per step of each group (``lib``: the
    backend's collective records with their canonical kinds; ``api``: the ``c10d::`` calls) and
    the bytes of the forward broadcasts when the trace's records carry them (``host_ws``/``host_we``:
    the steps in host time); ``issued``: the device ops' launch times, NaN where unknown."""
    if not ws.size:
        return {}
    # the calls say what each record is (gloo runs reduce_scatter as all_reduce)
    api_kinds = library_kinds_from_api([api.names[i] for i in np.argsort(api.start, kind="stable")], lib_kinds)
    if api_kinds is not None:
        lib_kinds = list(lib_kinds)
        for j, k in zip(np.argsort(lib.start, kind="stable").tolist(), api_kinds):
            lib_kinds[j] = k
    if issued is None:  # host records: paired with the c10d:: calls
        issued = issue_times(lib.start, api)
    else:  # device ops: their launch calls, else the c10d:: pairing, else their own start
        fallback = issue_times(lib.start, api)
        issued = np.where(np.isnan(issued), fallback, issued)
    groups = group_of(lib_kinds, issued, forward, backward)
    out = exposed_by_group(lib.start, lib.end, groups, exposed, ws, we)
    in_steps = _inside(lib.start, Spans(ws, we, []))
    counted = [g for g, ok in zip(groups, in_steps.tolist()) if ok]
    out["forward_broadcasts_per_step"] = float(counted.count(FORWARD_BROADCAST)) / ws.size
    out["backward_allreduces_per_step"] = float(counted.count(BACKWARD_ALLREDUCE)) / ws.size
    out["loop_syncs_per_step"] = float(counted.count(LOOP_SYNC)) / ws.size
    out.update(forward_broadcast_messages(msgs, forward, host_ws, host_we))
    return out
