"""Read one Kineto trace file into a :class:`RankTrace`: normalized numpy arrays.

Only this module touches raw JSON.  Both schema generations are normalized here:
2021 categories (``Kernel``, ``Runtime``, ``Operator``, ``Memcpy``, ``Memset``) and
current ones (``kernel``, ``cuda_runtime``, ``cuda_driver``, ``cpu_op``,
``user_annotation``, ``gpu_memcpy``, ``gpu_memset``).
"""

from __future__ import annotations

import bisect
import os

from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from .. import safe_io, sources
from ..errors import InputError
from . import classify
from . import columnar as C
from . import fastscan
from .messages import CollMessages, _no_messages, coll_messages
from .schema import EVENT_LIST_DECODER, TRACE_DECODER, Args, DeviceProperties, DistributedInfo, Event, Trace

# category (lower case) -> code: 1 kernel, 2 memcpy, 3 memset, 4 runtime, 5 operator, 6 annotation
CATEGORY_CODES = {"kernel": 1, "gpu_memcpy": 2, "memcpy": 2, "gpu_memset": 3, "memset": 3,
                  "cuda_runtime": 4, "runtime": 4, "cuda_driver": 4, "hip_runtime": 4,
                  "cpu_op": 5, "operator": 5, "user_annotation": 6}
LEGACY_CATS = ("Kernel", "Runtime", "Operator", "Memcpy", "Memset")
C_READER = "C reader"


def _category_code(cat: str) -> int:
    return CATEGORY_CODES.get(cat.lower(), 0)


@dataclass
class Spans:
    """Host or device spans of one kind, as parallel arrays (times in µs)."""

    start: np.ndarray
    end: np.ndarray
    names: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, start: list, end: list, names: list | None = None) -> Spans:
        return cls(np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64), names or [])

    def __len__(self) -> int:
        return int(self.start.size)


@dataclass
class GpuOps:
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray          # 0 compute kernel, 1 communication kernel, 2 memcpy, 3 memset
    correlation: np.ndarray   # int64, -1 when absent
    comm_kind: list[str]      # collective kind for communication kernels, "" otherwise
    pageable_h2d: np.ndarray | None = None   # bool: host-to-device copy from pageable memory
    traits: np.ndarray | None = None         # int8 bit set of kernel-name traits (classify.KERNEL_TRAITS)
    names: list[str] | None = None           # kernel / copy names (for the report's top kernels)

    KERNEL, COMM, MEMCPY, MEMSET = 0, 1, 2, 3


@dataclass
class RankTrace:
    """Everything the per-rank breakdown needs from one trace file."""

    path: str
    rank: int | None
    rank_source: str
    world_size: int | None
    backend: str | None
    devices: list[str]
    host: str | None
    pid: int | None
    schema: str                      # "2021" or "current"
    main_tid: int | str | None
    steps: list[tuple[str, float, float]]     # ProfilerStep#N host spans on the main thread
    dataloader: Spans                          # DataLoader __next__ spans (main thread)
    host_ops: Spans                            # cpu ops + runtime calls, every CPU thread of the process
    main_ops: Spans                            # cpu ops on the main thread (no annotations)
    forward: Spans
    backward: Spans
    optimizer: Spans
    host_collectives: Spans                    # gloo:* / nccl:* annotations (host side)
    runtime_launch: Spans                      # runtime calls that carry a correlation id
    runtime_corr: np.ndarray
    gpu: GpuOps
    first_ts: float
    last_ts: float
    n_events: int
    runtime_alloc: Spans = field(default_factory=lambda: Spans.build([], []))   # cudaMalloc/Free, hipMalloc/Free
    runtime_sync: Spans = field(default_factory=lambda: Spans.build([], []))    # device/stream/event synchronize
    forward_inputs: list = field(default_factory=list)   # (forward start, input shapes) per forward pass
    coll_messages: CollMessages = field(default_factory=_no_messages)
    decoder: str = ""                          # which reader decoded the file, and why not the C one


def read_bytes(path: Path | sources.RemoteFile) -> bytes:
    cap = safe_io.max_trace_bytes()
    if isinstance(path, sources.RemoteFile):
        raw = sources.read_capped(path, cap, "trace")
    else:
        raw = _read_local(path, cap)
    if raw[:2] == b"\x1f\x8b":
        raw = safe_io.gunzip_capped(raw, path, cap)
    return raw


def _read_local(path: Path, cap: int) -> bytes | bytearray:
    """``safe_io.read_capped(path, cap, "trace")`` without its chunk join: a regular file
    of known size is read into one buffer, which saves a copy of the file and halves the
    memory the read needs (the chunks and their join were alive together)."""
    with safe_io.open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > cap:
            raise InputError(f"{path}: trace larger than the limit of {cap} bytes "
                             "(raise it with DDPDOCTOR_MAX_TRACE_BYTES)")
        buf = bytearray(size + 1)          # one byte more: a file that grew is noticed
        got = 0
        with memoryview(buf) as view:
            try:
                while got <= size:
                    k = fh.readinto(view[got:])
                    if not k:
                        break
                    got += k
            except OSError as exc:
                raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if got > size:                         # written to while we read: the general path
        return safe_io.read_capped(path, cap, "trace")
    del buf[got:]
    return buf


def _decode(path: Path, raw: bytes) -> Trace:
    head = raw[:4096].lstrip()
    if not head:
        raise InputError(f"{path}: empty file")
    if head[:1] not in (b"{", b"["):
        raise InputError(f"{path}: not JSON (a Kineto trace is a JSON object with 'traceEvents')")
    try:
        if head[:1] == b"[":
            return Trace(traceEvents=EVENT_LIST_DECODER.decode(raw))
        return TRACE_DECODER.decode(raw)
    except msgspec.ValidationError:
        return _decode_lenient(path, raw)
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: invalid or truncated JSON ({exc})") from None
    except (RecursionError, OverflowError) as exc:
        raise InputError(f"{path}: undecodable JSON ({type(exc).__name__})") from None


def _decode_lenient(path: Path, raw: bytes) -> Trace:
    """Slow path for traces whose field types break the typed schema."""
    try:
        obj = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: invalid JSON ({exc})") from None
    events = obj if isinstance(obj, list) else obj.get("traceEvents") if isinstance(obj, dict) else None
    if not isinstance(events, list):
        raise InputError(f"{path}: JSON is not a profiler trace (no 'traceEvents' list)")
    out = []
    for e in events:
        if not isinstance(e, dict):
            continue
        try:
            out.append(msgspec.convert(e, Event, strict=False))
        except msgspec.ValidationError:
            a = e.get("args") if isinstance(e.get("args"), dict) else {}
            out.append(Event(ph=str(e.get("ph", "")), cat=str(e.get("cat", "")), name=str(e.get("name", "")),
                             pid=_as_id(e.get("pid")), tid=_as_id(e.get("tid")),
                             ts=_as_float(e.get("ts")), dur=_as_float(e.get("dur")),
                             args=Args(correlation=_as_id(a.get("correlation")),
                                       external_id=_as_id(a.get("External id")))))
    top = obj if isinstance(obj, dict) else {}
    trace = Trace(traceEvents=out)
    for key, typ in (("distributedInfo", DistributedInfo), ("deviceProperties", list[DeviceProperties])):
        try:
            setattr(trace, key, msgspec.convert(top.get(key), typ | None, strict=False))
        except msgspec.ValidationError:
            pass  # metadata is optional
    return trace


def _as_id(v):
    return v if isinstance(v, (int, str)) else 0


def _as_float(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return 0.0


def _int_or_none(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def load_rank_trace(path: Path, rank_hint: int | None = None, rank_hint_source: str = "file name",
                    comm_patterns: tuple[str, ...] = ()) -> RankTrace:
    # the compiled reader on the file mapped in memory, else on its bytes; else msgspec
    tried, fast = (False, None) if isinstance(path, sources.RemoteFile) else fastscan.scan_file(Path(path))
    if fast is None or not fast[0].n:
        raw = read_bytes(path)
        if not tried:
            fast = fastscan.scan(raw)
    if fast is not None and fast[0].n:
        from .colnorm import normalize_columns

        rt = normalize_columns(str(path), *fast, rank_hint, rank_hint_source, comm_patterns)
        rt.decoder = C_READER
        return rt
    del fast
    trace = _decode(path, raw)
    del raw
    if not trace.traceEvents:
        raise InputError(f"{path}: JSON is not a profiler trace (no events in 'traceEvents')")
    rt = normalize(str(path), trace, rank_hint, rank_hint_source, comm_patterns)
    rt.decoder = f"msgspec ({fastscan.unavailable_reason() or 'the C reader does not take this file'})"
    return rt


def normalize(path: str, trace: Trace, rank_hint: int | None, rank_hint_source: str,
              comm_patterns: tuple[str, ...] = ()) -> RankTrace:
    is_comm_name = classify.comm_kernel_matcher(comm_patterns)
    # Columnar: each field is read once per event by a C-level map over the event list,
    # and every name or category is classified once per distinct value (dict lookups),
    # so no per-event Python tuples are built (docs/DESIGN.md, "Decode").
    evs = [ev for ev in trace.traceEvents if ev.ph == "X"]
    n = len(evs)
    codes = C.PerValue(_category_code)
    code = np.fromiter(map(codes.__getitem__, map(C.CAT, evs)), dtype=np.int8, count=n)
    schema = "2021" if any(c in codes for c in LEGACY_CATS) else "current"
    gpu_idx = np.flatnonzero((code >= 1) & (code <= 3))
    op_idx = np.flatnonzero(code >= 4)
    k_ev = C.take(evs, gpu_idx)
    ops = C.take(evs, op_idx)
    del evs
    k_s, k_e = C.times(k_ev)
    op_s, op_e = C.times(ops)
    k_code = code[gpu_idx]
    op_code = code[op_idx]
    del code
    starts = [x.min() for x in (k_s, op_s) if x.size]
    ends = [x.max() for x in (k_e, op_e) if x.size]
    first, last = (min(starts), max(ends)) if starts else (0.0, 0.0)

    # --- host side -------------------------------------------------------------------
    op_name = list(map(C.NAME, ops))
    op_tid = list(map(C.TID, ops))
    op_pid = list(map(C.PID, ops))
    op_ann = np.where(op_code == 4, 2, op_code - 5).astype(np.int8)   # 0 op, 1 annotation, 2 runtime
    rt_mask = op_code == 4
    F = classify
    flag_of = C.PerValue(lambda nm: F.name_flags(nm) | (_STEP if nm.startswith("ProfilerStep#") else 0))
    flags = np.fromiter(map(flag_of.__getitem__, op_name), dtype=np.int32, count=len(op_name))
    steps_idx = np.flatnonzero(~rt_mask & ((flags & _STEP) != 0)).tolist()
    if steps_idx:
        main_tid, main_pid = op_tid[steps_idx[0]], op_pid[steps_idx[0]]
    else:
        main_tid, main_pid = classify.busiest_thread(op_s.tolist(), op_e.tolist(), op_tid, op_pid, op_ann.tolist())
    steps = sorted(((op_name[i], float(op_s[i]), float(op_e[i])) for i in steps_idx
                    if op_tid[i] == main_tid and op_pid[i] == main_pid), key=lambda x: x[1])
    in_pid, on_main = C.equals(op_pid, main_pid), C.equals(op_tid, main_tid)
    buckets = host_buckets(flags, in_pid, on_main, rt_mask, op_ann)
    ext_to_coll: dict = {}
    for i in buckets["coll"].tolist():
        ext = C.ext(ops[i].args)
        if ext is not None:
            ext_to_coll[ext] = classify.host_collective_kind(op_name[i])

    messages = _collective_messages(buckets["coll"].tolist(), ops, op_s)

    def spans(key: str) -> Spans:
        idx = buckets[key]
        return Spans(op_s[idx], op_e[idx], C.take(op_name, idx))

    host_ops, main_ops, dataloader = spans("host"), spans("main"), spans("dl")
    forward, backward, optimizer, host_coll = spans("fwd"), spans("bwd"), spans("opt"), spans("coll")
    rt_alloc, rt_sync = spans("alloc"), spans("sync")
    forward_inputs = _forward_inputs(forward, buckets["main"].tolist(), op_s, ops) if len(forward) else []

    # --- device side -----------------------------------------------------------------
    k_names = list(map(C.NAME, k_ev))
    k_args = list(map(C.ARGS, k_ev))
    del k_ev
    nk = len(k_names)
    kinds = np.full(nk, GpuOps.KERNEL, dtype=np.int8)
    pageable = np.zeros(nk, dtype=bool)
    traits = np.zeros(nk, dtype=np.int8)
    comm_kind: list[str] = [""] * nk
    mem = np.flatnonzero(k_code == 2)
    kinds[mem] = GpuOps.MEMCPY
    kinds[k_code == 3] = GpuOps.MEMSET
    page_of = {nm: "HtoD" in nm and "Pageable" in nm for nm in set(C.take(k_names, mem))}
    pageable[mem] = [page_of[k_names[j]] for j in mem.tolist()]
    kern = np.flatnonzero(k_code == 1)
    _kernel_kinds(kern, C.take(k_names, kern), C.take(k_args, kern), ext_to_coll, is_comm_name,
                  kinds, traits, comm_kind)
    gpu = GpuOps(k_s, k_e, kinds, C.corr_array(C.correlations(k_args)),
                 comm_kind, pageable, traits, k_names)
    rt_idx = np.flatnonzero(rt_mask)
    rt_corr = C.corr_array(C.correlations(list(map(C.ARGS, C.take(ops, rt_idx)))))
    rt_keep = rt_corr >= 0

    return rank_trace(
        path, trace, rank_hint, rank_hint_source, main_pid,
        schema=schema, main_tid=main_tid, steps=steps,
        dataloader=dataloader, host_ops=host_ops, main_ops=main_ops,
        forward=forward, backward=backward, optimizer=optimizer, host_collectives=host_coll,
        runtime_launch=Spans(op_s[rt_idx][rt_keep], op_e[rt_idx][rt_keep]),
        runtime_corr=rt_corr[rt_keep],
        gpu=gpu, first_ts=float(first) if n else 0.0, last_ts=float(last) if n else 0.0, n_events=n,
        runtime_alloc=rt_alloc, runtime_sync=rt_sync, forward_inputs=forward_inputs, coll_messages=messages,
    )


def _collective_messages(idx: list[int], ops: list, op_s: np.ndarray) -> CollMessages:
    """The host collective records (a few per step) that name their message size."""
    return coll_messages((float(op_s[i]), a.collective, a.in_nelems, a.dtype)
                         for i in idx if (a := ops[i].args) is not None)


def host_buckets(flags: np.ndarray, in_pid: np.ndarray, on_main: np.ndarray, rt_mask: np.ndarray,
                 op_ann: np.ndarray) -> dict[str, np.ndarray]:
    """Indices of the host events of each kind (both decode paths): every op and runtime call of the
    main process but markers, the main thread's ops, DataLoader, forward, backward, optimizer and
    collective ops, allocator and synchronizing runtime calls."""
    F = classify
    host = in_pid & ((flags & F.MARKER) == 0)
    host_rt = host & rt_mask
    host_op = host & ~rt_mask

    def has(flag: int) -> np.ndarray:
        return (flags & flag) != 0

    sel = {"host": host, "main": host_op & (op_ann == 0) & on_main,
           "dl": host_op & has(F.DATALOADER), "fwd": host_op & has(F.FORWARD),
           "bwd": host_op & has(F.BACKWARD), "opt": host_op & has(F.OPTIMIZER),
           "coll": host_op & has(F.COLLECTIVE),
           "alloc": host_rt & has(F.RT_ALLOC), "sync": host_rt & ~has(F.RT_ALLOC) & has(F.RT_SYNC)}
    return {k: np.flatnonzero(m) for k, m in sel.items()}


def rank_trace(path: str, meta: Trace, rank_hint: int | None, rank_hint_source: str, main_pid,
               **parts) -> RankTrace:
    """The RankTrace of either decode path (this module's ``normalize`` or colnorm's): the rank and
    the run facts from the trace's top-level fields (``meta``), the rest as the path built it."""
    dist = meta.distributedInfo
    rank = _int_or_none(dist.rank) if dist else None
    rank_source = "distributedInfo" if rank is not None else (rank_hint_source if rank_hint is not None else "none")
    return RankTrace(
        path=path, rank=rank if rank is not None else rank_hint, rank_source=rank_source,
        world_size=_int_or_none(dist.world_size) if dist else None,
        backend=dist.backend if dist else None,
        devices=[d.name for d in (meta.deviceProperties or []) if d.name],
        host=meta.host_name, pid=main_pid if isinstance(main_pid, int) else None, **parts)


_STEP = 1 << 16    # beside classify's name flags: a ProfilerStep#N span
def _kernel_kinds(kern: np.ndarray, names: list[str], args: list, ext_to_coll: dict, is_comm_name,
                  kinds: np.ndarray, traits: np.ndarray, comm_kind: list[str]) -> None:
    """Fill kinds, traits and collective kinds of the kernels at ``kern``: a kernel is a
    communication kernel when its args name a collective, when it was launched from a host
    collective (external id), or when its name matches a communication-kernel pattern."""
    if not len(kern):
        return
    comm_of = C.PerValue(lambda nm: bool(is_comm_name(nm)))
    comm = np.fromiter(map(comm_of.__getitem__, names), dtype=bool, count=len(names))
    marked = [a.collective if a is not None else None for a in args]
    comm |= np.fromiter(map(bool, marked), dtype=bool, count=len(marked))
    parents = [None] * len(names)
    if ext_to_coll:
        exts = list(map(C.ext, args)) if None in args else list(map(C.EXT, args))
        if None in exts:    # 2021 traces spell it "external id"
            exts = list(map(C.ext, args))
        parents = list(map(ext_to_coll.get, exts))
        comm |= np.fromiter(map(ext_to_coll.__contains__, exts), dtype=bool, count=len(exts))
    kind_of: dict = {}
    for j in np.flatnonzero(comm).tolist():
        key = (marked[j] or None, names[j], parents[j])
        ck = kind_of.get(key)
        if ck is None:
            ck = kind_of[key] = classify.collective_kind(*key)
        comm_kind[int(kern[j])] = ck
    kinds[kern[comm]] = GpuOps.COMM
    plain = np.flatnonzero(~comm)
    plain_names = C.take(names, plain)
    trait_of = C.PerValue(classify.kernel_traits)
    traits[kern[plain]] = np.fromiter(map(trait_of.__getitem__, plain_names), dtype=np.int8, count=len(plain))


def _forward_inputs(forward: Spans, main_idx: list[int], op_s: np.ndarray, ops: list) -> list[tuple[float, str]]:
    """(start, input shapes of the first main-thread op of the forward) for each forward span:
    with record_shapes, this is the batch the model received (e.g. [[32, 3, 224, 224], ...])."""
    if not len(forward):
        return []
    cand = []
    for i in main_idx:
        args = ops[i].args
        if args is not None and args.input_dims:
            cand.append((float(op_s[i]), i))
    if not cand:
        return []
    cand.sort()
    starts = [c[0] for c in cand]
    out: list[tuple[float, str]] = []
    for fs, fe in sorted(zip(forward.start.tolist(), forward.end.tolist())):
        if out and fs < out[-1][0] + 1e-9:
            continue
        j = bisect.bisect_left(starts, fs)
        if j < len(cand) and starts[j] <= fe:
            out.append((fs, bytes(ops[cand[j][1]].args.input_dims).decode("utf-8", "replace")))
    return out
