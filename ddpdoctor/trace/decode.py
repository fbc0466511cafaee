"""Read one Kineto trace file into a :class:`~.model.RankTrace`.

Only this module and the two readers touch raw JSON: the compiled reader (trace/fastscan.py) on the
file mapped in memory or on its bytes, else msgspec's typed decode (trace/msgscan.py, with a lenient
path for odd field types). Both give the same :class:`~.columns.Columns`, which the one normaliser
(trace/normalize.py) turns into the RankTrace.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from .. import safe_io, sources
from ..errors import InputError
from . import fastscan, msgscan
from .model import GpuOps, RankTrace, Spans
from .normalize import normalize
from .schema import EVENT_LIST_DECODER, TRACE_DECODER, Args, DeviceProperties, DistributedInfo, Event, Trace

__all__ = ["GpuOps", "RankTrace", "Spans", "load_rank_trace", "read_bytes"]
C_READER = "C reader"


def read_bytes(path: Path | sources.RemoteFile) -> bytes | bytearray:
    cap = safe_io.max_trace_bytes()
    raw: bytes | bytearray
    if isinstance(path, sources.RemoteFile):
        raw = sources.read_capped(path, cap, "trace")
    else:
        raw = _read_local(path, cap)
    if raw[:2] == b"\x1f\x8b":
        raw = safe_io.gunzip_capped(raw, path.url if isinstance(path, sources.RemoteFile) else path, cap)
    return raw


def _read_local(path: Path, cap: int) -> bytes | bytearray:
    """``safe_io.read_capped(path, cap, "trace")`` without its chunk join: a regular file
    of known size is read into one buffer, which saves a copy of the file and halves the
    memory the read needs (the chunks and their join were alive together)."""
    with safe_io.open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > cap:
            raise InputError(
                f"{path}: trace larger than the limit of {cap} bytes (raise it with DDPDOCTOR_MAX_TRACE_BYTES)"
            )
        buf = bytearray(size + 1)  # one byte more: a file that grew is noticed
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
    if got > size:  # written to while we read: the general path
        return safe_io.read_capped(path, cap, "trace")
    del buf[got:]
    return buf


def decode_trace(path: Path, raw: bytes | bytearray) -> Trace:
    """The trace as trace/schema.py's structs (msgspec); a one-line InputError when it is not one."""
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


def _decode_lenient(path: Path, raw: bytes | bytearray) -> Trace:
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
            args = e.get("args")
            a = args if isinstance(args, dict) else {}
            out.append(
                Event(
                    ph=str(e.get("ph", "")),
                    cat=str(e.get("cat", "")),
                    name=str(e.get("name", "")),
                    pid=_as_id(e.get("pid")),
                    tid=_as_id(e.get("tid")),
                    ts=_as_float(e.get("ts")),
                    dur=_as_float(e.get("dur")),
                    args=Args(correlation=_as_id(a.get("correlation")), external_id=_as_id(a.get("External id"))),
                )
            )
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


def load_rank_trace(
    path: Path, rank_hint: int | None = None, rank_hint_source: str = "file name", comm_patterns: tuple[str, ...] = ()
) -> RankTrace:
    """The compiled reader on the file mapped in memory, else on its bytes; else msgspec."""
    tried, fast = (False, None) if isinstance(path, sources.RemoteFile) else fastscan.scan_file(Path(path))
    if fast is None or not fast[0].n:
        raw = read_bytes(path)
        if not tried:
            fast = fastscan.scan(raw)
    if fast is not None and fast[0].n:
        cols, meta = fast
        decoder = C_READER
    else:
        del fast
        meta = decode_trace(path, raw)
        del raw
        if not meta.traceEvents:
            raise InputError(f"{path}: JSON is not a profiler trace (no events in 'traceEvents')")
        cols = msgscan.columns(meta)
        meta.traceEvents = []
        decoder = f"msgspec ({fastscan.unavailable_reason() or 'the C reader does not take this file'})"
    rt = normalize(str(path), cols, meta, rank_hint, rank_hint_source, comm_patterns)
    rt.decoder = decoder
    return rt
