"""Step phases of one rank, from the host side of its trace: where each step's time goes in the training loop's
own terms, and which implementation the optimizer ran.

Phases (mean µs per step, exclusive, claimed in this order): waiting for the DataLoader (its ``__next__``), the
optimizer step (``Optimizer.step#…``), ``zero_grad`` (``Optimizer.zero_grad#…``), the backward (autograd's
``evaluate_function`` spans, DDP's gradient all-reduce included), the forward (DDP's forward span), moving the
batch to the device (top-level ``aten::to``/``_to_copy``/``copy_`` outside every phase above), and the loop's own
code: whatever is left of the step outside every phase and collective (the script's Python between the calls,
logging, metrics).

The optimizer's implementation is read from the operators inside its step: ``aten::_fused_*`` (``fused=True``),
``aten::_foreach_*`` (``foreach=True``, the default for CUDA tensors), else the single-tensor for-loop, which runs
the same few operators once per parameter tensor: the count most of its operator names share per step is the
number of parameter tensors it loops over (Adam: ``addcdiv_``, ``sqrt``, ``lerp_``, … once each per tensor).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..trace.model import RankTrace, Spans
from . import intervals as iv
from .op_overhead import top_level

STEP_PREFIX = "Optimizer.step#"
ZERO_GRAD_PREFIX = "Optimizer.zero_grad#"
TO_DEVICE_OPS = ("aten::to", "aten::_to_copy", "aten::copy_")
PHASES = ("data", "optimizer_step", "zero_grad", "backward", "forward", "to_device", "loop")


def _named(sp: Spans, prefix: str) -> Spans:
    keep = [i for i, n in enumerate(sp.names) if n.startswith(prefix)]
    return Spans(sp.start[keep], sp.end[keep], [sp.names[i] for i in keep])


def _to_device(main_ops: Spans) -> iv.Intervals:
    """The top-level copy ops (not nested in another op) on the training thread."""
    if not len(main_ops) or not main_ops.names:
        return iv.EMPTY
    copies = [i for i, n in enumerate(main_ops.names) if n in TO_DEVICE_OPS]
    if not copies:
        return iv.EMPTY
    s, e = top_level(main_ops.start, main_ops.end)
    tops = set(zip(s.tolist(), e.tolist()))
    keep = [(main_ops.start[i], main_ops.end[i]) for i in copies if (main_ops.start[i], main_ops.end[i]) in tops]
    if not keep:
        return iv.EMPTY
    return iv.union(np.asarray([a for a, _ in keep]), np.asarray([b for _, b in keep]))


def phase_extras(rt: RankTrace, ws: np.ndarray, we: np.ndarray, collectives: iv.Intervals) -> dict[str, float | None]:
    """``phase_<name>_us`` per step for each of PHASES, and the optimizer's operators (see optimizer_extras)."""
    if not ws.size:
        return {}

    def per_step(x: iv.Intervals) -> float:
        return float(np.sum(iv.measure_in_windows(x, ws, we))) / ws.size

    step_ops = _named(rt.optimizer, STEP_PREFIX)
    claimed = iv.EMPTY
    sets = {
        "data": iv.union(rt.dataloader.start, rt.dataloader.end),
        "optimizer_step": _union(step_ops),
        "zero_grad": _union(_named(rt.optimizer, ZERO_GRAD_PREFIX)),
        "backward": iv.union(rt.backward.start, rt.backward.end),
        "forward": iv.union(rt.forward.start, rt.forward.end),
        "to_device": _to_device(rt.main_ops),
    }
    out: dict[str, float | None] = {}
    for name, x in sets.items():
        own = iv.difference(x, claimed)
        out[f"phase_{name}_us"] = per_step(own)
        claimed = iv.merge(claimed, own)
    windows = iv.union(np.asarray(ws, dtype=float), np.asarray(we, dtype=float))
    rest = iv.difference(windows, iv.merge(claimed, collectives))
    out["phase_loop_us"] = per_step(rest)
    out.update(optimizer_extras(step_ops, rt.main_ops, ws, we))
    return out


def optimizer_steps(rt: RankTrace) -> iv.Intervals:
    """The optimizer's ``step()`` calls on the training thread."""
    return _union(_named(rt.optimizer, STEP_PREFIX))


def _union(sp: Spans) -> iv.Intervals:
    return iv.union(sp.start, sp.end)


def optimizer_extras(step_ops: Spans, main_ops: Spans, ws: np.ndarray, we: np.ndarray) -> dict[str, float | None]:
    """Per optimizer step inside the windows: ``optimizer_ops_per_step`` (every operator inside it, nested ones
    too), ``optimizer_foreach_ops_per_step``, ``optimizer_fused_ops_per_step`` and ``optimizer_loop_params`` (the
    single-tensor loop's parameter tensors; None when the step ran foreach or fused operators)."""
    if not len(step_ops) or not len(main_ops) or not main_ops.names:
        return {}
    inside = np.zeros(step_ops.start.size, dtype=bool)
    w = np.searchsorted(ws, step_ops.start, side="right") - 1
    ok = w >= 0
    inside[ok] = step_ops.start[ok] < we[w[ok]]  # a step belongs to the window it starts in
    if not inside.any():
        return {}
    order = np.argsort(main_ops.start, kind="stable")
    starts = main_ops.start[order]
    names: Counter = Counter()
    for a, b in zip(step_ops.start[inside].tolist(), step_ops.end[inside].tolist()):
        lo, hi = int(np.searchsorted(starts, a, side="left")), int(np.searchsorted(starts, b, side="right"))
        names.update(main_ops.names[int(k)] for k in order[lo:hi] if main_ops.end[int(k)] <= b)
    n = int(inside.sum())
    foreach = sum(c for nm, c in names.items() if nm.startswith("aten::_foreach_"))
    fused = sum(c for nm, c in names.items() if nm.startswith("aten::_fused_"))
    return {
        "optimizer_ops_per_step": sum(names.values()) / n,
        "optimizer_foreach_ops_per_step": foreach / n,
        "optimizer_fused_ops_per_step": fused / n,
        "optimizer_loop_params": _loop_params(names, n) if not foreach and not fused else None,
    }


def _loop_params(names: Counter, steps: int) -> float | None:
    """The count per step that most operator names inside the single-tensor loop share (ties: the smallest):
    each of those operators runs once per parameter tensor."""
    per_step = Counter(c // steps for c in names.values() if c % steps == 0 and c // steps >= 2)
    if not per_step:
        return None
    best = max(per_step.values())
    return float(min(c for c, k in per_step.items() if k == best))


def optimizer_class(optimizer: Spans) -> str | None:
    """``Adam`` from ``Optimizer.step#Adam.step``: the class whose step ran most often."""
    found = Counter(n[len(STEP_PREFIX) :].split(".", 1)[0] for n in optimizer.names if n.startswith(STEP_PREFIX))
    return found.most_common(1)[0][0] if found else None
