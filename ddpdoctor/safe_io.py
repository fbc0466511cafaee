"""Reading untrusted input without hanging or exhausting memory.

Every file ddpdoctor reads comes from a user's folder and may be anything: a FIFO named
``rank0.json`` (``open()`` blocks forever), a symlink to ``/dev/zero`` (never ends), a gzip bomb,
a symlink loop.  These helpers stat before opening, open only regular files, and read with a
cap.  Problems are ``InputError`` (one line, exit 2); callers walking a folder turn them into
warnings and go on with the other files.

Limits (bytes) can be raised with environment variables:

    DDPDOCTOR_MAX_TRACE_BYTES   a trace after gunzip (default 4 GiB)
    DDPDOCTOR_MAX_GZIP_RATIO    decompressed / compressed size allowed past 256 MiB (default 200)
    DDPDOCTOR_MAX_LOG_BYTES     bytes read from one log (default 256 MiB; the rest is skipped, and said)
    DDPDOCTOR_MAX_MEMBER_BYTES  one member of a ticket archive or bundle read back (default 512 MiB)
"""

from __future__ import annotations

import errno
import json
import os
import stat
import zlib
from pathlib import Path

from .errors import InputError
from .text import plural

DEFAULT_MAX_TRACE_BYTES = 4 << 30
DEFAULT_MAX_LOG_BYTES = 256 << 20
DEFAULT_MAX_MEMBER_BYTES = 512 << 20
DEFAULT_MAX_GZIP_RATIO = 200
MAX_WORLD_SIZE = 1 << 20  # larger world sizes are not believed (no per-rank allocation)
MAX_LOG_LINE_CHARS = 64 * 1024  # longer lines are cut


def limit(name: str, default: int) -> int:
    """A byte limit from the environment variable ``name`` (an integer, optional K/M/G suffix)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1:].upper(), 1)
    try:
        value = int(raw[:-1] if mult > 1 else raw) * mult
    except ValueError:
        raise InputError(f"{name}={raw!r} is not a size (use bytes or a K/M/G suffix)") from None
    if value <= 0:
        raise InputError(f"{name}={raw!r} must be positive")
    return value


def max_trace_bytes() -> int:
    return limit("DDPDOCTOR_MAX_TRACE_BYTES", DEFAULT_MAX_TRACE_BYTES)


def max_log_bytes() -> int:
    return limit("DDPDOCTOR_MAX_LOG_BYTES", DEFAULT_MAX_LOG_BYTES)


def max_member_bytes() -> int:
    return limit("DDPDOCTOR_MAX_MEMBER_BYTES", DEFAULT_MAX_MEMBER_BYTES)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def check_regular(path: Path | str) -> os.stat_result:
    """The stat of ``path`` when it is (or links to) a regular file; else a one-line InputError
    (symlink loop, dangling link, FIFO, socket, device, unreadable)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{p}: symlink loop") from None
        if exc.errno == errno.ENOENT and os.path.islink(p):
            raise InputError(f"{p}: dangling symlink (its target does not exist)") from None
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except (RuntimeError, ValueError) as exc:
        raise InputError(f"{p}: cannot read ({exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{p}: {_kind(st.st_mode)}, not a regular file (not read)")
    return st


def open_regular(path: Path | str):
    """A binary file object for a regular file, opened without blocking on FIFOs swapped in
    after the stat (O_NONBLOCK, re-checked with fstat)."""
    p = Path(path)
    check_regular(p)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{p}: not a regular file (not read)")
    return os.fdopen(fd, "rb")


def read_head(path: Path | str, n: int) -> bytes:
    with open_regular(path) as fh:
        try:
            return fh.read(n)
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_capped(path: Path | str, cap: int, what: str = "file", env: str = "DDPDOCTOR_MAX_TRACE_BYTES") -> bytes:
    """The whole file, or an InputError naming the file and the limit when it is larger."""
    with open_regular(path) as fh:
        data = read_stream_capped(fh, cap, path)
    if len(data) > cap:
        raise InputError(f"{path}: {what} larger than the limit of {cap} bytes (raise it with {env})")
    return data


def read_stream_capped(fh, cap: int, path: Path | str = "input") -> bytes:
    """At most ``cap + 1`` bytes of a binary stream, read in chunks (``read(n)`` would
    allocate ``n`` bytes up front)."""
    parts, total = [], 0
    try:
        while total <= cap:
            chunk = fh.read(min(16 << 20, cap + 1 - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return b"".join(parts)


def gunzip_capped(raw: bytes | bytearray, path: Path | str, cap: int, env: str = "DDPDOCTOR_MAX_TRACE_BYTES") -> bytes:
    """Streamed gzip decompression (concatenated members too) that stops at ``cap`` bytes, or
    earlier at DDPDOCTOR_MAX_GZIP_RATIO times the compressed size (past 256 MiB): profiler JSON
    compresses about 10-30x, a bomb of zeros about 1000x."""
    ratio = limit("DDPDOCTOR_MAX_GZIP_RATIO", DEFAULT_MAX_GZIP_RATIO)
    if ratio * len(raw) < cap:
        cap, env = max(256 << 20, ratio * len(raw)), f"{env} or DDPDOCTOR_MAX_GZIP_RATIO={ratio}"
    out = bytearray()
    data = raw
    try:
        while data:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while data:
                chunk = d.decompress(data, 1 << 20)
                out += chunk
                if len(out) > cap:
                    raise InputError(
                        f"{path}: decompresses to more than the limit of {cap} bytes "
                        f"(a gzip bomb? raise the limit with {env})"
                    )
                data = d.unconsumed_tail
                if d.eof:
                    break
            if not d.eof:
                raise InputError(f"{path}: corrupt gzip (truncated)")
            data = d.unused_data.lstrip(b"\x00")
            if data[:2] != b"\x1f\x8b":
                break
    except zlib.error as exc:
        raise InputError(f"{path}: corrupt gzip ({exc})") from None
    return bytes(out)


def sane_world_size(value, where: str, warnings: list | None = None) -> int | None:
    """A world size that is believable, else None (with a warning): no per-rank allocation for 10⁹."""
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if n <= 0:
        return None
    if n > MAX_WORLD_SIZE:
        if warnings is not None:
            warnings.append(f"{where}: world_size {n} is beyond {MAX_WORLD_SIZE}; ignored")
        return None
    return n


def read_log_text(path: Path | str, warnings: list | None = None) -> str:
    """A log as text, read as a bounded stream: at most DDPDOCTOR_MAX_LOG_BYTES bytes, lines cut
    at MAX_LOG_LINE_CHARS, invalid UTF-8 replaced.  What was skipped is added to ``warnings``."""
    cap = max_log_bytes()
    parts: list[bytes] = []
    total = cut_lines = 0
    truncated = False
    with open_regular(path) as fh:
        try:
            while True:
                line = fh.readline(MAX_LOG_LINE_CHARS)
                if not line:
                    break
                total += len(line)
                if not line.endswith(b"\n"):
                    # an over-long line: drop the rest of it without holding it in memory
                    rest = 0
                    while True:
                        more = fh.readline(1 << 20)
                        if not more:
                            break
                        rest += len(more)
                        total += len(more)
                        if more.endswith(b"\n") or total > cap:
                            break
                    if rest:
                        cut_lines += 1
                        line += b" [...]\n"
                parts.append(line)
                if total > cap:
                    truncated = True
                    break
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if warnings is not None:
        if truncated:
            warnings.append(f"{path}: only the first {cap} bytes were read (raise DDPDOCTOR_MAX_LOG_BYTES)")
        if cut_lines:
            warnings.append(f"{path}: {plural(cut_lines, 'line')} longer than {MAX_LOG_LINE_CHARS} bytes were cut")
    return b"".join(parts).decode("utf-8", errors="replace")


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a valid JSON number")


def load_json(raw: bytes, where: str):
    """JSON from untrusted bytes: NaN/Infinity refused, invalid UTF-8, nesting too deep for
    the parser and numbers too large all become one-line InputErrors."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None
    except (ValueError, OverflowError) as exc:
        raise InputError(f"{where}: invalid JSON ({str(exc)[:200]})") from None
