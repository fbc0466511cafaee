"""Part of the capture agent: what two settings of the job's own cost on this host, measured in the rank
(torch is passed in, never imported).

- Autograd anomaly mode stores a formatted Python traceback with every autograd node the forward creates
  (and checks every gradient for NaN in the backward).  ``anomaly_cost`` times a chain of tiny
  differentiable ops with anomaly mode on and off as deep in the Python stack as the model's nodes are
  (their mean traceback length, when its first forward was counted), restoring the user's mode after;
  ``graph_nodes`` counts the nodes of one forward's graph and the frames of the tracebacks stored with them.  Together: anomaly mode's forward cost per step
  (bundle/job_config.py); its backward NaN checks are not counted (a lower bound).
- float64 parameters: ``float64_slowdown`` times a 256-row matmul of the model's largest float64 weight's
  shape (each side capped at 512) in float64 and in float32 on its device; the ratio is how much slower its
  arithmetic runs in float64.
"""

from __future__ import annotations

import time

_CHAIN = 40  # differentiable ops per timed chain
_REPEATS = 5  # the fastest of these chains counts (other processes on the host only add time)
_MAX_EXTRA_FRAMES = 200  # deepest padding of the anomaly timing's stack
_MAX_DIM = 512  # the float64 timing's matmul: each side of the weight's shape capped at this


_TRACE_KEY = "traceback_"  # where anomaly mode keeps a node's formatted stack (its metadata dict)


def _chain(torch, x, repeats: int = _REPEATS) -> tuple[float, int]:
    """(µs per differentiable op, frames in its stored traceback: 0 with anomaly mode off), fastest of a few."""
    best, y = None, x
    for _ in range(repeats):
        t0 = time.perf_counter()
        y = x
        for _ in range(_CHAIN):
            y = y * 1.0
        dt = (time.perf_counter() - t0) / _CHAIN
        best = dt if best is None else min(best, dt)
    return best * 1e6, _frames(y)


def _frames(y) -> int:
    """Frames of the traceback anomaly mode stored with the node that made ``y`` (0 with the mode off)."""
    return len((getattr(y.grad_fn, "metadata", None) or {}).get(_TRACE_KEY) or ())


def _deeper(n: int, fn):
    """fn() called n frames deeper; two functions in turn, since a traceback folds repeats of one line."""
    return fn() if n <= 0 else _deeper_too(n - 1, fn)


def _deeper_too(n: int, fn):
    return fn() if n <= 0 else _deeper(n - 1, fn)


def anomaly_cost(torch, frames_per_node: float | None = None) -> dict:
    """What anomaly mode adds to creating one autograd node here (µs, on minus off) and the frames of the
    traceback it stored.  Formatting a stack costs per frame: with the model's mean frames per node known (its
    first forward was counted), the chain runs that many frames deep; the reader scales a deeper timing down
    to the model's stacks, never a shallower one up (a lower bound)."""
    was_on, check_nan = torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()
    with torch.enable_grad():
        x = torch.ones(4, requires_grad=True)
        try:
            torch.autograd.set_detect_anomaly(True, check_nan=check_nan)
            _, here = _deeper(0, lambda: _chain(torch, x, repeats=1))  # the frames of a chain not padded
            extra = min(_MAX_EXTRA_FRAMES, max(0, round((frames_per_node or 0) - here)))
            on, frames = _deeper(extra, lambda: _chain(torch, x))
            torch.autograd.set_detect_anomaly(False)
            off, _ = _deeper(extra, lambda: _chain(torch, x))
        finally:
            torch.autograd.set_detect_anomaly(was_on, check_nan=check_nan)
    return {"us_per_node": round(max(0.0, on - off), 3), "frames": frames}


def _tensors(out, depth=0):
    if depth > 3:
        return
    if hasattr(out, "grad_fn"):
        yield out
    elif isinstance(out, dict):
        for v in out.values():
            yield from _tensors(v, depth + 1)
    elif isinstance(out, (list, tuple)):
        for v in out:
            yield from _tensors(v, depth + 1)


def graph_nodes(out, limit: int = 200_000) -> tuple[int, int]:
    """(autograd nodes behind a forward's outputs, frames of the tracebacks anomaly mode stored with them);
    AccumulateGrad (one per parameter, made once) is left out."""
    stack = [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
    seen, n, frames = set(), 0, 0
    while stack and len(seen) < limit:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ != "AccumulateGrad":
            n += 1
            frames += len((getattr(fn, "metadata", None) or {}).get(_TRACE_KEY) or ())
        stack.extend(f for f, _ in fn.next_functions)
    return n, frames


def float64_slowdown(torch, params) -> float | None:
    """float64 matmul time over float32 on the largest float64 weight's shape and device (None: no 2-D one)."""
    weights = [p for p in params if p.dtype == torch.float64 and p.dim() == 2]
    if not weights:
        return None
    w = max(weights, key=lambda p: p.numel())
    rows = 256
    inner, outer = (
        min(int(w.shape[1]), _MAX_DIM),
        min(int(w.shape[0]), _MAX_DIM),
    )  # bounded: a few ms, not a big model's matmul

    def timed(dtype) -> float:
        with torch.no_grad():
            a = torch.ones(rows, inner, dtype=dtype, device=w.device)
            b = torch.ones(inner, outer, dtype=dtype, device=w.device)
            best = None
            for _ in range(_REPEATS):
                if w.device.type == "cuda":
                    torch.cuda.synchronize(w.device)
                t0 = time.perf_counter()
                for _ in range(4):
                    a @ b
                if w.device.type == "cuda":
                    torch.cuda.synchronize(w.device)
                dt = time.perf_counter() - t0
                best = dt if best is None else min(best, dt)
            return best

    t32 = timed(torch.float32)
    return round(timed(torch.float64) / t32, 3) if t32 > 0 else None
