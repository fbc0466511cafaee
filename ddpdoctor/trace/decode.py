"""Read one Kineto trace file into a :class:`RankTrace`: normalized numpy arrays.

Only this module touches raw JSON.  Both schema generations are normalized here:
2021 categories (``Kernel``, ``Runtime``, ``Operator``, ``Memcpy``, ``Memset``) and
current ones (``kernel``, ``cuda_runtime``, ``cuda_driver``, ``cpu_op``,
``user_annotation``, ``gpu_memcpy``, ``gpu_memset``).
"""

from __future__ import annotations

import bisect

from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from .. import safe_io, sources
from ..errors import InputError
from . import classify
from .schema import EVENT_LIST_DECODER, TRACE_DECODER, Args, DeviceProperties, DistributedInfo, Event, Trace

# category (lower case) -> code: 1 kernel, 2 memcpy, 3 memset, 4 runtime, 5 operator, 6 annotation
CATEGORY_CODES = {"kernel": 1, "gpu_memcpy": 2, "memcpy": 2, "gpu_memset": 3, "memset": 3,
                  "cuda_runtime": 4, "runtime": 4, "cuda_driver": 4, "hip_runtime": 4,
                  "cpu_op": 5, "operator": 5, "user_annotation": 6}
LEGACY_CATS = ("Kernel", "Runtime", "Operator", "Memcpy", "Memset")


def _category_code(cat: str) -> int:
    return CATEGORY_CODES.get(cat.lower(), 0)


def _columns(rows: list[tuple], width: int) -> list[list]:
    """Transpose row tuples into ``width`` column lists."""
    return [list(c) for c in zip(*rows)] if rows else [[] for _ in range(width)]


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


def read_bytes(path: Path | sources.RemoteFile) -> bytes:
    cap = safe_io.max_trace_bytes()
    if isinstance(path, sources.RemoteFile):
        raw = sources.read_capped(path, cap, "trace")
    else:
        raw = safe_io.read_capped(path, cap, "trace")
    if raw[:2] == b"\x1f\x8b":
        raw = safe_io.gunzip_capped(raw, path, cap)
    return raw


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
    raw = read_bytes(path)
    trace = _decode(path, raw)
    del raw
    if not trace.traceEvents:
        raise InputError(f"{path}: JSON is not a profiler trace (no events in 'traceEvents')")
    return normalize(str(path), trace, rank_hint, rank_hint_source, comm_patterns)


def normalize(path: str, trace: Trace, rank_hint: int | None, rank_hint_source: str,
              comm_patterns: tuple[str, ...] = ()) -> RankTrace:
    is_comm_name = classify.comm_kernel_matcher(comm_patterns)
    # One pass, one append per event: category strings repeat, so their meaning is cached.
    codes: dict[str, int] = {}
    gpu_rows: list[tuple] = []     # (ts, end, kind, name, args)
    op_rows: list[tuple] = []      # (ts, end, tid, name, ext, pid, ann)  ann: 0 op, 1 annotation, 2 runtime
    rt_rows: list[tuple] = []      # (ts, end, correlation)
    n = 0
    for ev in trace.traceEvents:
        if ev.ph != "X":
            continue
        n += 1
        code = codes.get(ev.cat)
        if code is None:
            code = codes[ev.cat] = _category_code(ev.cat)
        if not code:
            continue
        ts = ev.ts
        dur = ev.dur
        end = ts + dur if dur > 0 else ts
        args = ev.args
        if code <= 3:
            gpu_rows.append((ts, end, code, ev.name, args))
        elif code == 4:
            rt_rows.append((ts, end, args.correlation if args else None))
            op_rows.append((ts, end, ev.tid, ev.name, None, ev.pid, 2, None))
        else:
            ext = (args.external_id if args.external_id is not None else args.external_id_2021) if args else None
            op_rows.append((ts, end, ev.tid, ev.name, ext, ev.pid, code - 5,
                            args.input_dims if args is not None and args.input_dims else None))
    schema = "2021" if any(c in codes for c in LEGACY_CATS) else "current"
    k_s, k_e, k_code, k_names, k_args = _columns(gpu_rows, 5)
    rt_s, rt_e, rt_corr = _columns(rt_rows, 3)
    op_s, op_e, op_tid, op_name, op_ext, op_pid, op_ann, op_dims = _columns(op_rows, 8)
    del gpu_rows, op_rows, rt_rows
    starts = [min(x) for x in (k_s, op_s) if x]
    ends = [max(x) for x in (k_e, op_e) if x]
    first, last = (min(starts), max(ends)) if starts else (0.0, 0.0)

    # --- host side -------------------------------------------------------------------
    flags_of = classify.cached_by_name(classify.name_flags)
    steps_idx = [i for i, nm in enumerate(op_name) if op_ann[i] != 2 and nm.startswith("ProfilerStep#")]
    if steps_idx:
        main_tid, main_pid = op_tid[steps_idx[0]], op_pid[steps_idx[0]]
    else:
        main_tid, main_pid = classify.busiest_thread(op_s, op_e, op_tid, op_pid, op_ann)
    steps = sorted(((op_name[i], op_s[i], op_e[i]) for i in steps_idx
                    if op_tid[i] == main_tid and op_pid[i] == main_pid), key=lambda x: x[1])
    buckets: dict[str, list[int]] = {k: [] for k in ("host", "main", "dl", "fwd", "bwd", "opt", "coll",
                                                      "alloc", "sync")}
    F = classify
    ext_to_coll: dict = {}
    for i, nm in enumerate(op_name):
        if op_pid[i] != main_pid:
            continue
        f = flags_of(nm)
        if f & F.MARKER:
            continue
        buckets["host"].append(i)
        if op_ann[i] == 2:
            if f & (F.RT_ALLOC | F.RT_SYNC):
                buckets["alloc" if f & F.RT_ALLOC else "sync"].append(i)
            continue
        if op_ann[i] == 0 and op_tid[i] == main_tid:
            buckets["main"].append(i)
        if f & F.DATALOADER:
            buckets["dl"].append(i)
        if f & F.FORWARD:
            buckets["fwd"].append(i)
        if f & F.BACKWARD:
            buckets["bwd"].append(i)
        if f & F.OPTIMIZER:
            buckets["opt"].append(i)
        if f & F.COLLECTIVE:
            buckets["coll"].append(i)
            if op_ext[i] is not None:
                ext_to_coll[op_ext[i]] = classify.host_collective_kind(nm)

    def spans(key: str) -> Spans:
        sel = buckets[key]
        return Spans.build([op_s[i] for i in sel], [op_e[i] for i in sel], [op_name[i] for i in sel])

    host_ops, main_ops, dataloader = spans("host"), spans("main"), spans("dl")
    forward, backward, optimizer, host_coll = spans("fwd"), spans("bwd"), spans("opt"), spans("coll")
    rt_alloc, rt_sync = spans("alloc"), spans("sync")
    forward_inputs = _forward_inputs(forward, buckets["main"], op_s, op_dims)

    # --- device side -----------------------------------------------------------------
    kinds = np.empty(len(k_s), dtype=np.int8)
    pageable = np.zeros(len(k_s), dtype=bool)
    traits = np.zeros(len(k_s), dtype=np.int8)
    trait_of = classify.cached_by_name(classify.kernel_traits)
    comm_kind: list[str] = []
    k_corr = []
    for j, (name, args) in enumerate(zip(k_names, k_args)):
        k_corr.append(args.correlation if args else None)
        if k_code[j] == 2:
            kinds[j] = GpuOps.MEMCPY
            pageable[j] = "HtoD" in name and "Pageable" in name
        elif k_code[j] == 3:
            kinds[j] = GpuOps.MEMSET
        else:
            marked = args is not None and args.collective
            ext = (args.external_id if args.external_id is not None else args.external_id_2021) if args else None
            parent = ext_to_coll.get(ext) if ext is not None else None
            if marked or parent is not None or is_comm_name(name):
                kinds[j] = GpuOps.COMM
                ck = classify.collective_kind(args.collective if marked else None, name, parent)
                comm_kind.append(ck)
                continue
            kinds[j] = GpuOps.KERNEL
            traits[j] = trait_of(name)
        comm_kind.append("")
    gpu = GpuOps(np.asarray(k_s, dtype=np.float64), np.asarray(k_e, dtype=np.float64), kinds,
                 np.asarray([_corr(c) for c in k_corr], dtype=np.int64), comm_kind, pageable, traits, list(k_names))
    rt_keep = [i for i, c in enumerate(rt_corr) if _corr(c) >= 0]

    dist = trace.distributedInfo
    rank = _int_or_none(dist.rank) if dist else None
    rank_source = "distributedInfo" if rank is not None else (rank_hint_source if rank_hint is not None else "none")
    if rank is None:
        rank = rank_hint
    return RankTrace(
        path=path, rank=rank, rank_source=rank_source,
        world_size=_int_or_none(dist.world_size) if dist else None,
        backend=dist.backend if dist else None,
        devices=[d.name for d in (trace.deviceProperties or []) if d.name],
        host=trace.host_name, pid=main_pid if isinstance(main_pid, int) else None,
        schema=schema, main_tid=main_tid, steps=steps,
        dataloader=dataloader, host_ops=host_ops, main_ops=main_ops,
        forward=forward, backward=backward, optimizer=optimizer, host_collectives=host_coll,
        runtime_launch=Spans.build([rt_s[i] for i in rt_keep], [rt_e[i] for i in rt_keep]),
        runtime_corr=np.asarray([_corr(rt_corr[i]) for i in rt_keep], dtype=np.int64),
        gpu=gpu, first_ts=float(first) if n else 0.0, last_ts=float(last) if n else 0.0, n_events=n,
        runtime_alloc=rt_alloc, runtime_sync=rt_sync, forward_inputs=forward_inputs,
    )


def _forward_inputs(forward: Spans, main_idx: list[int], op_s: list, op_dims: list) -> list[tuple[float, str]]:
    """(start, input shapes of the first main-thread op of the forward) for each forward span:
    with record_shapes, this is the batch the model received (e.g. [[32, 3, 224, 224], ...])."""
    if not len(forward):
        return []
    cand = sorted((op_s[i], i) for i in main_idx if op_dims[i] is not None)
    if not cand:
        return []
    starts = [c[0] for c in cand]
    out: list[tuple[float, str]] = []
    for fs, fe in sorted(zip(forward.start.tolist(), forward.end.tolist())):
        if out and fs < out[-1][0] + 1e-9:
            continue
        j = bisect.bisect_left(starts, fs)
        if j < len(cand) and starts[j] <= fe:
            out.append((fs, bytes(op_dims[cand[j][1]]).decode("utf-8", "replace")))
    return out


def _corr(c) -> int:
    try:
        return int(c)
    except (TypeError, ValueError):
        return -1
