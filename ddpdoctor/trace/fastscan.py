"""The compiled column reader (``_kscan.c``, built by ``pip install``): a trace's complete events
straight into numpy columns, without a Python object per event.

:func:`scan` returns ``None`` whenever the reader is not built or the trace is anything but plain
JSON of the schema's types (see the C file); the caller then decodes with msgspec
(trace/msgscan.py); both readers' columns go through the one normaliser (trace/normalize.py).
``DDPDOCTOR_NO_KSCAN=1`` turns the reader off; a library built from other sources than the
ones beside it (a checkout updated without a reinstall) is not used.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from .. import safe_io
from ..errors import InputError
from .columns import HAS_CORR, HAS_EXT, PID_STR, TID_STR, Columns
from .schema import TRACE_DECODER, Trace

OK, BAIL, FULL = 0, 1, 2
_P = ctypes.c_void_p


class _KScan(ctypes.Structure):
    _fields_ = [
        ("cap", ctypes.c_int64),
        ("n", ctypes.c_int64),
        *(
            (f, _P)
            for f in (
                "ts",
                "dur",
                "cat",
                "name",
                "coll",
                "pid",
                "tid",
                "corr",
                "ext",
                "dims_off",
                "dims_len",
                "flags",
                "msg_off",
                "msg_len",
                "dtype",
            )
        ),
        ("strcap", ctypes.c_int32),
        ("nstr", ctypes.c_int32),
        ("str_off", _P),
        ("str_len", _P),
        ("str_esc", _P),
        ("htab", _P),
        ("hsize", ctypes.c_int64),
        ("events_start", ctypes.c_int64),
        ("events_end", ctypes.c_int64),
        ("fail_at", ctypes.c_int64),
    ]


_ROW = (
    ("ts", np.float64),
    ("dur", np.float64),
    ("cat", np.int32),
    ("name", np.int32),
    ("coll", np.int32),
    ("pid", np.int64),
    ("tid", np.int64),
    ("corr", np.int64),
    ("ext", np.int64),
    ("dims_off", np.int64),
    ("dims_len", np.int32),
    ("flags", np.uint8),
    ("msg_off", np.int64),
    ("msg_len", np.int32),
    ("dtype", np.int32),
)
_NELEMS = msgspec.json.Decoder(int | float | str | None)
_lib_cache: list = []  # [the library, or None]
_why_not: list[str] = [""]  # why the library is not used


def _candidates() -> list[Path]:
    """Where the library may be: beside this file (a wheel), or ``ddpdoctor_native/`` on sys.path
    (an editable install puts it in site-packages, never in the checkout; see hatch_build.py)."""
    here = Path(__file__).with_name("_kscan.so")
    return [here, *(Path(p) / "ddpdoctor_native" / "_kscan.so" for p in sys.path if p)]


def _load() -> tuple[ctypes.CDLL | None, str]:
    """The first library found that was built from the sources beside this file, with the struct
    layout of :class:`_KScan`; else None and why."""
    if os.environ.get("DDPDOCTOR_NO_KSCAN"):
        return None, "turned off by DDPDOCTOR_NO_KSCAN"
    why = "the C reader is not built (no C compiler when ddpdoctor was installed)"
    for so in (p for p in _candidates() if p.is_file()):
        lib, why = _open(so)
        if lib is not None:
            return lib, ""
    return None, why


def _open(so: Path) -> tuple[ctypes.CDLL | None, str]:
    try:
        lib = ctypes.CDLL(str(so))
        lib.ks_source_id.restype = ctypes.c_char_p
        if lib.ks_source_id().decode() != source_hash(Path(__file__).parent):
            return None, "the C reader was built from other sources (reinstall ddpdoctor)"
        lib.ks_layout.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int64]
        lib.ks_layout.restype = ctypes.c_int64
        if c_layout(lib) != ctypes_layout():
            return None, "the C reader's struct differs from fastscan.py's (reinstall ddpdoctor)"
        for fn in (lib.ks_scan, lib.ks_scan_mapped):
            fn.argtypes = [_P, ctypes.c_int64, ctypes.POINTER(_KScan)]
            fn.restype = ctypes.c_int
    except (OSError, AttributeError) as exc:
        return None, f"the C reader cannot be loaded ({exc})"
    return lib, ""


def _lib():
    if not _lib_cache:
        lib, _why_not[0] = _load()
        _lib_cache.append(lib)
    return _lib_cache[0]


def unavailable_reason() -> str:
    """Why the C reader is not used ("" when it is)."""
    if _lib() is not None:
        return ""
    return _why_not[0] or "the C reader is turned off"


def c_layout(lib) -> list[int]:
    """The C side's ``sizeof(KScan)`` and field offsets (``ks_layout`` in _kscan.c)."""
    out = (ctypes.c_int64 * 64)()
    k = lib.ks_layout(out, 64)
    return list(out[:k])


def ctypes_layout() -> list[int]:
    """The same numbers for the ctypes mirror :class:`_KScan`."""
    return [ctypes.sizeof(_KScan), *(getattr(_KScan, f[0]).offset for f in _KScan._fields_)]


def source_hash(folder: Path) -> str:
    """The hash hatch_build.py compiles into the library (see there)."""
    h = hashlib.sha256()
    for name in ("_kscan.c", "_kscan_lex.h"):
        h.update((folder / name).read_bytes())
    return h.hexdigest()[:16]


def available() -> bool:
    return _lib() is not None


@dataclass
class RawArgs:
    """:class:`~.columns.ArgColumns` of the scan: full columns, and spans of the file's bytes for the
    two args read for a few rows only."""

    raw: bytes | bytearray | mmap.mmap
    corr_col: np.ndarray  # -1 where absent
    ext_col: np.ndarray
    has_ext: np.ndarray
    coll_ids: np.ndarray  # -1: none
    dtype_ids: np.ndarray  # -1: none
    dims_off: np.ndarray
    dims_len: np.ndarray  # -1: no "Input Dims"
    msg_off: np.ndarray
    msg_len: np.ndarray  # -1: no "In msg nelems" (or null)
    strings_or_none: np.ndarray  # the strings as an object array, None last: id -1 reads None

    def corr(self, rows: np.ndarray) -> np.ndarray:
        return self.corr_col[rows]

    def ext(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.has_ext[rows], self.ext_col[rows]

    def coll(self, rows: np.ndarray) -> np.ndarray:
        return self.strings_or_none[self.coll_ids[rows]]

    def dtype(self, rows: np.ndarray) -> np.ndarray:
        return self.strings_or_none[self.dtype_ids[rows]]

    def has_msg(self, rows: np.ndarray) -> np.ndarray:
        return self.msg_len[rows] >= 0

    def has_dims(self, rows: np.ndarray) -> np.ndarray:
        return self.dims_len[rows] > 0

    def in_nelems(self, i: int) -> int | float | str | None:
        """args "In msg nelems" of row ``i`` as msgspec decodes it into the schema's type."""
        if self.msg_len[i] < 0:
            return None
        o = int(self.msg_off[i])
        return _NELEMS.decode(bytes(self.raw[o : o + int(self.msg_len[i])]))

    def input_dims(self, i: int) -> str:
        o = int(self.dims_off[i])
        return bytes(self.raw[o : o + int(self.dims_len[i])]).decode("utf-8", "replace")


def scan_file(path: Path) -> tuple[bool, tuple[Columns, Trace] | None]:
    """(tried, :func:`scan` of the file mapped in memory): no copy of the file is made. Not
    tried (the caller reads the file) when the reader is not built or the file is compressed,
    empty, over the size limit or unreadable; tried and ``None`` when the scan bailed."""
    if _lib() is None:
        return False, None
    try:
        with safe_io.open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            if not size or size > safe_io.max_trace_bytes():
                return False, None
            m = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY)
    except (InputError, OSError, ValueError):
        return False, None
    if m[:2] == b"\x1f\x8b":
        m.close()
        return False, None
    if hasattr(m, "madvise") and hasattr(mmap, "MADV_SEQUENTIAL"):
        m.madvise(mmap.MADV_SEQUENTIAL)
    return True, scan(m, mapped=True)


def scan(raw: bytes | bytearray | mmap.mmap, mapped: bool = False) -> tuple[Columns, Trace] | None:
    lib = _lib()
    if lib is None or not raw:
        return None
    size = len(raw)
    cbuf: ctypes.c_char_p | ctypes.Array[ctypes.c_char]
    if isinstance(raw, bytes):
        cbuf = ctypes.c_char_p(raw)
        ptr = ctypes.cast(cbuf, _P).value
    else:  # bytearray, a writable (copy-on-write) mmap
        cbuf = (ctypes.c_char * size).from_buffer(raw)
        ptr = ctypes.addressof(cbuf)
    cap, strcap = max(1024, size // 150), 1 << 16
    try:
        for _ in range(4):
            cols: dict[str, np.ndarray] = {f: np.empty(cap, dtype=t) for f, t in _ROW}
            strs: dict[str, np.ndarray] = {
                "str_off": np.empty(strcap, np.int64),
                "str_len": np.empty(strcap, np.int32),
                "str_esc": np.empty(strcap, np.uint8),
                "htab": np.full(2 * strcap, -1, np.int32),
            }
            k = _KScan(
                cap=cap, strcap=strcap, hsize=2 * strcap, **{f: a.ctypes.data for f, a in {**cols, **strs}.items()}
            )
            rc = (lib.ks_scan_mapped if mapped else lib.ks_scan)(ptr, size, ctypes.byref(k))
            if rc != FULL:
                break
            if k.n >= cap:
                cap = _count(raw, b'"X"') + 1  # every complete event spells "X"
            elif strcap < (1 << 24):
                strcap *= 16
            else:
                return None
        if rc != OK:
            return None
        n, nstr, ev0, ev1 = k.n, k.nstr, k.events_start, k.events_end
    finally:
        del cbuf
    try:
        strings = _strings(raw, strs["str_off"][:nstr], strs["str_len"][:nstr], strs["str_esc"][:nstr])
        meta = TRACE_DECODER.decode(bytes(raw[:ev0]) + b"[]" + bytes(raw[ev1:]))
    except (msgspec.DecodeError, UnicodeDecodeError):  # ValidationError is a DecodeError
        return None
    # one id per distinct string: escaped spellings of the same text share it
    canon: dict[str, int] = {}
    remap = np.fromiter((canon.setdefault(s, len(canon)) for s in strings), dtype=np.int32, count=len(strings))
    c: dict[str, np.ndarray] = {f: a[:n] for f, a in cols.items()}
    for f in ("cat", "name"):
        c[f] = remap[c[f]] if n else c[f].copy()
    for f in ("coll", "dtype"):
        has = c[f] >= 0
        c[f] = np.where(has, remap[np.where(has, c[f], 0)], -1) if nstr else c[f].copy()
    for f, bit in (("pid", PID_STR), ("tid", TID_STR)):
        is_str = (c["flags"] & bit) != 0
        if is_str.any():
            c[f] = np.where(is_str, remap[np.where(is_str, c[f], 0)], c[f])
        else:
            c[f] = c[f].copy()
    c["corr"] = np.where((c["flags"] & HAS_CORR) != 0, c["corr"], -1)
    for f in ("ts", "dur", "ext", "dims_off", "dims_len", "flags", "msg_off", "msg_len"):
        c[f] = c[f].copy()  # compact: the capacity beyond n is released
    strings = list(canon)
    args = RawArgs(
        raw,
        c.pop("corr"),
        c.pop("ext"),
        (c["flags"] & HAS_EXT) != 0,
        c.pop("coll"),
        c.pop("dtype"),
        c.pop("dims_off"),
        c.pop("dims_len"),
        c.pop("msg_off"),
        c.pop("msg_len"),
        strings_or_none=np.array([*strings, None], dtype=object),
    )
    return Columns(n=n, strings=strings, args=args, **c), meta


def _count(raw: bytes | bytearray | mmap.mmap, needle: bytes) -> int:
    """``raw.count(needle)``; an mmap has no count(): its find() is walked instead (no copy of the file)."""
    if not isinstance(raw, mmap.mmap):
        return raw.count(needle)
    n, at = 0, raw.find(needle)
    while at >= 0:
        n, at = n + 1, raw.find(needle, at + len(needle))
    return n


def _strings(raw, off: np.ndarray, ln: np.ndarray, esc: np.ndarray) -> list[str]:
    mv = memoryview(raw)
    out = []
    for o, k, e in zip(off.tolist(), ln.tolist(), esc.tolist()):
        b = bytes(mv[o : o + k])
        out.append(msgspec.json.decode(b'"' + b + b'"') if e else b.decode("utf-8"))
    mv.release()
    return out
