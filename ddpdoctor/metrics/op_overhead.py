"""Per-operator overhead on a CPU rank: how much of the step goes to operators too small for their
arithmetic to matter, and to the Python between them.

Every eager operator costs the host a few microseconds whatever its size (Python call, dispatcher,
autograd bookkeeping). A step of a few large operators (convolutions, big matmuls) spends its time in
arithmetic; a step of thousands of tiny ones (a recurrent cell stepped in a Python loop, element-wise
work per sample) spends it in that fixed cost. The trace shows it directly on the training thread:
the top-level operators (those not nested inside another) shorter than TINY_US, and the gaps shorter
than TINY_US between consecutive ones (the Python that issues them). Time inside the DataLoader's
``__next__`` is left out: it is the loader's cost, not the model's.
"""

from __future__ import annotations

import numpy as np

from ..trace.model import Spans
from . import intervals as iv

TINY_US = 50.0  # an operator (or a gap between two) this short is mostly fixed per-call cost

# the maps of torch.nn.utils.parametrizations (orthogonal: matrix_exp, householder_product; weight_norm) and
# their backward nodes: a parametrized weight is recomputed by these at every access unless
# torch.nn.utils.parametrize.cached() holds it for the step
PARAM_MAP_OPS = frozenset(
    {"aten::linalg_matrix_exp", "aten::matrix_exp", "aten::linalg_householder_product", "aten::_weight_norm"}
)
PARAM_MAP_BACKWARD = frozenset(
    {
        "LinalgMatrixExpBackward0",
        "MatrixExpBackward0",
        "LinalgHouseholderProductBackward0",
        "WeightNormInterfaceBackward0",
    }
)


def top_level(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The spans not nested inside an earlier one, sorted by start."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    if not s.size:
        return s, e
    reach = np.maximum.accumulate(e)
    top = np.ones(s.size, dtype=bool)
    top[1:] = s[1:] >= reach[:-1]
    return s[top], e[top]


def param_map_extras(main_ops: Spans, ws: np.ndarray, we: np.ndarray) -> dict[str, float]:
    """param_map_calls_per_step (outermost forward calls of a parametrization map) and param_map_share (their
    time and their backward nodes' time, nesting counted once) over the step windows."""
    if not ws.size or not len(main_ops) or len(main_ops.names) != len(main_ops):
        return {}
    idx = [i for i, n in enumerate(main_ops.names) if n in PARAM_MAP_OPS or n in PARAM_MAP_BACKWARD]
    if not idx:
        return {}
    sel = np.asarray(idx)
    s, e = main_ops.start[sel], main_ops.end[sel]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    names = [main_ops.names[idx[k]] for k in order]
    reach = np.maximum.accumulate(e)
    top = np.ones(s.size, dtype=bool)
    top[1:] = s[1:] >= reach[:-1]
    step = np.searchsorted(ws, s, side="right") - 1
    inside = (step >= 0) & top
    inside[inside] = e[inside] <= we[step[inside]]
    total = float(np.sum(we - ws))
    if not inside.any() or total <= 0:
        return {}
    calls = sum(1 for k in np.flatnonzero(inside) if names[k] in PARAM_MAP_OPS)
    return {
        "param_map_calls_per_step": calls / ws.size,
        "param_map_share": float(np.sum(e[inside] - s[inside])) / total,
    }


def op_overhead_extras(
    main_ops: Spans, not_the_model: iv.Intervals, ws: np.ndarray, we: np.ndarray
) -> dict[str, float]:
    """cpu_ops_per_step, cpu_op_median_us and tiny_op_share over the step windows (ws, we: sorted).
    ``not_the_model``: phases whose operators are another cost's, left out — the DataLoader's ``__next__`` (the
    loader's) and the optimizer's step (its per-parameter loop is the optimizer rule's: counted here too, it made
    the host-bound cost outrank the optimizer's own on b5's Adam over 3,000 tensors)."""
    if not ws.size or not len(main_ops):
        return {}
    s, e = top_level(main_ops.start, main_ops.end)
    step = np.searchsorted(ws, s, side="right") - 1
    inside = step >= 0
    inside[inside] = e[inside] <= we[step[inside]]
    if not_the_model.total > 0:
        inside &= ~(iv.measure_in_windows(not_the_model, s, e) > 0)
    s, e, step = s[inside], e[inside], step[inside]
    total = float(np.sum(we - ws))
    if not s.size or total <= 0:
        return {}
    dur = e - s
    tiny = float(dur[dur < TINY_US].sum())
    gap = s[1:] - e[:-1]
    same_step = step[1:] == step[:-1]
    short = same_step & (gap >= 0) & (gap < TINY_US)
    tiny += float(gap[short].sum())
    return {
        "cpu_ops_per_step": float(s.size) / ws.size,
        "cpu_op_median_us": float(np.median(dur)),
        "tiny_op_share": tiny / total,
    }
