"""The one normaliser: a reader's :class:`~.columns.Columns` (trace/fastscan.py or trace/msgscan.py)
into a :class:`~.model.RankTrace`.

Both schema generations are normalized here: 2021 categories (``Kernel``, ``Runtime``, ``Operator``,
``Memcpy``, ``Memset``) and current ones (``kernel``, ``cuda_runtime``, ``cuda_driver``, ``cpu_op``,
``user_annotation``, ``gpu_memcpy``, ``gpu_memset``). Every field is a numpy column and every string
an id: categories, names, collective names and string pids / tids are classified once per distinct
string and spread with an array take, so no Python code runs per event.
"""

from __future__ import annotations

import bisect
import json

import numpy as np

from . import classify
from .columns import PID_STR, TID_STR, Columns
from .messages import CollMessages, coll_messages
from .model import GpuOps, RankTrace, Spans, rank_trace
from .schema import Trace

# category (lower case) -> code: 1 kernel, 2 memcpy, 3 memset, 4 runtime, 5 operator, 6 annotation
CATEGORY_CODES = {
    "kernel": 1,
    "gpu_memcpy": 2,
    "memcpy": 2,
    "gpu_memset": 3,
    "memset": 3,
    "cuda_runtime": 4,
    "runtime": 4,
    "cuda_driver": 4,
    "hip_runtime": 4,
    "cpu_op": 5,
    "operator": 5,
    "user_annotation": 6,
}
LEGACY_CATS = ("Kernel", "Runtime", "Operator", "Memcpy", "Memset")
STEP = 1 << 16  # beside classify's name flags: a ProfilerStep#N span


def category_code(cat: str) -> int:
    return CATEGORY_CODES.get(cat.lower(), 0)


class _Strings:
    """Per distinct string (an id of ``Columns.strings``), a value computed once."""

    def __init__(self, strings: list[str]):
        self.strings = strings
        self.obj = np.array(strings + [""], dtype=object)[:-1]  # a 1-d object array, even of tuples

    def table(self, fn, ids: np.ndarray, dtype) -> np.ndarray:
        """``fn(string)`` for the strings at ``ids`` (others 0), as an array indexed by id."""
        out = np.zeros(len(self.strings), dtype=dtype)
        for i in self.present(ids).tolist():
            out[i] = fn(self.strings[i])
        return out

    def present(self, ids: np.ndarray) -> np.ndarray:
        """The distinct ids, sorted (``np.unique`` without a sort)."""
        return np.flatnonzero(np.bincount(ids, minlength=len(self.strings)))

    def take(self, ids: np.ndarray) -> list[str]:
        return self.obj[ids].tolist() if len(ids) else []


def _ids(col: np.ndarray, flags: np.ndarray, bit: int, strings: list):
    """Python values of an int-or-string id column (``flags & bit``: an id into ``strings``):
    ``at(i)``, ``equals(value)``, ``tolist()``."""
    is_str = (flags & bit) != 0
    any_str = bool(is_str.any())

    def at(i: int):
        return strings[int(col[i])] if any_str and is_str[i] else int(col[i])

    def equals(value) -> np.ndarray:
        if isinstance(value, int) and -(1 << 63) <= value < (1 << 63):
            return ~is_str & (col == value) if any_str else col == value
        sid = strings.index(value) if value in strings else -1  # a string, a big int (or None: no row)
        return is_str & (col == sid)

    def tolist() -> list:
        return [at(i) for i in range(len(col))] if any_str else col.tolist()

    return at, equals, tolist


def normalize(
    path: str,
    cols: Columns,
    meta: Trace,
    rank_hint: int | None,
    rank_hint_source: str,
    comm_patterns: tuple[str, ...] = (),
) -> RankTrace:
    is_comm_name = classify.comm_kernel_matcher(comm_patterns)
    S = _Strings(cols.strings)
    n = cols.n
    code = S.table(category_code, cols.cat, np.int8)[cols.cat]
    schema = "2021" if any(cols.strings[i] in LEGACY_CATS for i in S.present(cols.cat).tolist()) else "current"
    gpu_idx = np.flatnonzero((code >= 1) & (code <= 3))
    op_idx = np.flatnonzero(code >= 4)
    ts, dur = cols.ts, cols.dur
    end = np.where(dur > 0, ts + dur, ts)
    k_s, k_e, op_s, op_e = ts[gpu_idx], end[gpu_idx], ts[op_idx], end[op_idx]
    k_code, op_code = code[gpu_idx], code[op_idx]
    starts = [x.min() for x in (k_s, op_s) if x.size]
    ends = [x.max() for x in (k_e, op_e) if x.size]
    first, last = (min(starts), max(ends)) if starts else (0.0, 0.0)

    # --- host side -------------------------------------------------------------------
    op_name = cols.name[op_idx]
    op_flags = cols.flags[op_idx]
    tid_at, tid_eq, tid_list = _ids(cols.tid[op_idx], op_flags, TID_STR, cols.strings)
    pid_at, pid_eq, pid_list = _ids(cols.pid[op_idx], op_flags, PID_STR, cols.strings)
    op_ann = np.where(op_code == 4, 2, op_code - 5).astype(np.int8)  # 0 op, 1 annotation, 2 runtime
    rt_mask = op_code == 4
    F = classify
    flags = S.table(lambda nm: F.name_flags(nm) | (STEP if nm.startswith("ProfilerStep#") else 0), op_name, np.int32)[
        op_name
    ]
    steps_idx = np.flatnonzero(~rt_mask & ((flags & STEP) != 0)).tolist()
    if steps_idx:
        main_tid, main_pid = tid_at(steps_idx[0]), pid_at(steps_idx[0])
    else:
        main_tid, main_pid = classify.busiest_thread(
            op_s.tolist(), op_e.tolist(), tid_list(), pid_list(), op_ann.tolist()
        )
    in_pid, on_main = pid_eq(main_pid), tid_eq(main_tid)
    steps = sorted(
        ((cols.strings[op_name[i]], float(op_s[i]), float(op_e[i])) for i in steps_idx if on_main[i] and in_pid[i]),
        key=lambda x: x[1],
    )
    buckets = host_buckets(flags, in_pid, on_main, rt_mask, op_ann)
    coll_rows = op_idx[buckets["coll"]]
    present, keys = cols.args.ext(coll_rows)
    ext_to_coll = {
        k: classify.host_collective_kind(cols.strings[nm])
        for k, nm, has in zip(keys.tolist(), op_name[buckets["coll"]].tolist(), present.tolist())
        if has
    }

    messages = _collective_messages(coll_rows, op_s[buckets["coll"]], cols)

    def spans(key: str) -> Spans:
        idx = buckets[key]
        return Spans(op_s[idx], op_e[idx], S.take(op_name[idx]))

    host_ops, main_ops, dataloader = spans("host"), spans("main"), spans("dl")
    forward, backward, optimizer, host_coll = spans("fwd"), spans("bwd"), spans("opt"), spans("coll")
    rt_alloc, rt_sync = spans("alloc"), spans("sync")
    forward_inputs = _forward_inputs(forward, op_idx[buckets["main"]], cols) if len(forward) else []

    # --- device side -----------------------------------------------------------------
    k_name = cols.name[gpu_idx]
    k_names = S.take(k_name)
    nk = len(k_names)
    kinds = np.full(nk, GpuOps.KERNEL, dtype=np.int8)
    pageable = np.zeros(nk, dtype=bool)
    traits = np.zeros(nk, dtype=np.int8)
    comm_kind: list[str] = [""] * nk
    mem = np.flatnonzero(k_code == 2)
    kinds[mem] = GpuOps.MEMCPY
    kinds[k_code == 3] = GpuOps.MEMSET
    pageable[mem] = S.table(lambda nm: "HtoD" in nm and "Pageable" in nm, k_name[mem], bool)[k_name[mem]]
    kern = np.flatnonzero(k_code == 1)
    _kernel_kinds(kern, gpu_idx[kern], cols, S, ext_to_coll, is_comm_name, kinds, traits, comm_kind)
    gpu = GpuOps(k_s, k_e, kinds, cols.args.corr(gpu_idx), comm_kind, pageable, traits, k_names)
    rt_idx = np.flatnonzero(rt_mask)
    rt_corr = cols.args.corr(op_idx[rt_idx])
    rt_keep = rt_corr >= 0

    return rank_trace(
        path,
        meta,
        rank_hint,
        rank_hint_source,
        main_pid,
        schema=schema,
        main_tid=main_tid,
        steps=steps,
        dataloader=dataloader,
        host_ops=host_ops,
        main_ops=main_ops,
        forward=forward,
        backward=backward,
        optimizer=optimizer,
        host_collectives=host_coll,
        runtime_launch=Spans(op_s[rt_idx][rt_keep], op_e[rt_idx][rt_keep]),
        runtime_corr=rt_corr[rt_keep],
        gpu=gpu,
        first_ts=float(first) if n else 0.0,
        last_ts=float(last) if n else 0.0,
        n_events=n,
        runtime_alloc=rt_alloc,
        runtime_sync=rt_sync,
        forward_inputs=forward_inputs,
        coll_messages=messages,
    )


def host_buckets(
    flags: np.ndarray, in_pid: np.ndarray, on_main: np.ndarray, rt_mask: np.ndarray, op_ann: np.ndarray
) -> dict[str, np.ndarray]:
    """Indices of the host events of each kind : every op and runtime call of the
    main process but markers, the main thread's ops, DataLoader, forward, backward, optimizer and
    collective ops, allocator and synchronizing runtime calls."""
    F = classify
    host = in_pid & ((flags & F.MARKER) == 0)
    host_rt = host & rt_mask
    host_op = host & ~rt_mask

    def has(flag: int) -> np.ndarray:
        return (flags & flag) != 0

    sel = {
        "host": host,
        "main": host_op & (op_ann == 0) & on_main,
        "dl": host_op & has(F.DATALOADER),
        "fwd": host_op & has(F.FORWARD),
        "bwd": host_op & has(F.BACKWARD),
        "opt": host_op & has(F.OPTIMIZER),
        "coll": host_op & has(F.COLLECTIVE),
        "alloc": host_rt & has(F.RT_ALLOC),
        "sync": host_rt & ~has(F.RT_ALLOC) & has(F.RT_SYNC),
    }
    return {k: np.flatnonzero(m) for k, m in sel.items()}


def _kernel_kinds(
    kern: np.ndarray,
    rows: np.ndarray,
    cols: Columns,
    S: _Strings,
    ext_to_coll: dict,
    is_comm_name,
    kinds: np.ndarray,
    traits: np.ndarray,
    comm_kind: list[str],
) -> None:
    """Fill kinds, traits and collective kinds of the kernels (``kern`` indexes the GPU ops, ``rows``
    the same kernels' rows of ``cols``): a kernel is a communication kernel when its args name a
    collective, when it was launched from a host collective (external id), or when its name matches
    a communication-kernel pattern."""
    if not len(kern):
        return
    names = cols.name[rows]
    comm = S.table(lambda nm: bool(is_comm_name(nm)), names, bool)[names]
    coll = cols.args.coll(rows)
    marked = np.fromiter(map(bool, coll), dtype=bool, count=len(coll))
    comm |= marked
    parents = None
    if ext_to_coll:
        present, keys = cols.args.ext(rows)
        if keys.dtype == np.int64 and all(type(k) is int for k in ext_to_coll):
            known = np.isin(keys, np.fromiter(ext_to_coll, dtype=np.int64, count=len(ext_to_coll)))
        else:
            known = np.fromiter(map(ext_to_coll.__contains__, keys.tolist()), dtype=bool, count=len(keys))
        parented = present & known
        comm |= parented
        parents = (parented, keys)
    kind_of: dict = {}
    for j in np.flatnonzero(comm).tolist():
        mark = coll[j] if marked[j] else None
        parent = ext_to_coll[_py(parents[1][j])] if parents is not None and parents[0][j] else None
        key = (mark, cols.strings[names[j]], parent)
        ck = kind_of.get(key)
        if ck is None:
            ck = kind_of[key] = classify.collective_kind(*key)
        comm_kind[int(kern[j])] = ck
    kinds[kern[comm]] = GpuOps.COMM
    plain = np.flatnonzero(~comm)
    traits[kern[plain]] = S.table(classify.kernel_traits, names[plain], np.int8)[names[plain]]


def _collective_messages(rows: np.ndarray, starts: np.ndarray, cols: Columns) -> CollMessages:
    """The host collective records (rows of ``cols``, a few per step) that name their message size."""
    coll, has_msg, dtype = cols.args.coll(rows), cols.args.has_msg(rows), cols.args.dtype(rows)
    return coll_messages(
        (s, coll[j], cols.args.in_nelems(r), dtype[j])
        for j, (r, s) in enumerate(zip(rows.tolist(), starts.tolist()))
        if coll[j] is not None and has_msg[j]
    )


BATCH_SEARCH_OPS = 64  # main-thread ops with shapes looked at per forward for the one that takes the batch


def _forward_inputs(forward: Spans, main_rows: np.ndarray, cols: Columns) -> list[tuple[float, str]]:
    """(start, input shapes of the op that takes the batch) for each forward span (rows of the main-thread
    ops): with record_shapes, the batch the model received. That is the first op of the forward whose first
    input is one tensor of two or more dimensions: DDP's forward first flattens and broadcasts the module's
    buffers (a list of tensors, then the 1-D BatchNorm statistics one by one), which says nothing of the
    batch. Without such an op, the forward's first op with shapes."""
    with_dims = main_rows[cols.args.has_dims(main_rows)]
    if not len(with_dims):
        return []
    cand = sorted(zip(cols.ts[with_dims].tolist(), with_dims.tolist()))
    starts = [c[0] for c in cand]
    out: list[tuple[float, str]] = []
    for fs, fe in sorted(zip(forward.start.tolist(), forward.end.tolist())):
        if out and fs < out[-1][0] + 1e-9:
            continue
        j = bisect.bisect_left(starts, fs)
        if j < len(cand) and starts[j] <= fe:
            out.append((fs, _batch_dims(cand, starts, j, fe, cols)))
    return out


def _batch_dims(cand: list, starts: list, j: int, fe: float, cols: Columns) -> str:
    first = cols.args.input_dims(cand[j][1])
    for k in range(j, min(len(cand), j + BATCH_SEARCH_OPS)):
        if starts[k] > fe:
            break
        text = first if k == j else cols.args.input_dims(cand[k][1])
        if _takes_a_batch(text):
            return text
    return first


def _takes_a_batch(dims_text: str) -> bool:
    """The op's first input is one tensor of 2+ dimensions ("[[8, 3, 32, 32], ...]")."""
    try:
        dims = json.loads(dims_text)
    except ValueError:
        return False
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return False
    head = dims[0]
    return len(head) >= 2 and all(isinstance(d, int) for d in head)


def _py(v):
    return v.item() if isinstance(v, np.generic) else v
