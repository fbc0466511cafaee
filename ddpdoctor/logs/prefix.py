"""Split one log line into (prefixes, message): rank prefixes, timestamps, glog and NCCL headers.

Handled, in any combination and order:
  ``[default1]:``            torchrun --tee prefix (role + local rank)
  ``[rank3]:``               PyTorch's per-rank prefix of uncaught errors and c10d logs
  ``[80746] ``               a number in brackets pasted in front (line numbers of a paste)
  ``2025-06-24 17:29:06  ``  ``[2024-01-02 03:04:05,678]``  ISO timestamps
  ``[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] `` / ``E1122 00:46:25.806000 10800 f.py:1002] ``  glog
  ``[E ProcessGroupNCCL.cpp:458] ``   old c10d prefix without time
  ``host:pid:tid [dev] NCCL INFO|WARN …``  NCCL debug lines
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

_TEE = re.compile(r"^\[(?!rank\d)([A-Za-z_][\w\-]*?)(\d+)\]:")
_RANKP = re.compile(r"^\[rank(\d+)\]:?\s?")
_PASTE_NO = re.compile(r"^\[\d{3,}\]\s+")
_ISO = re.compile(
    r"^\[?(\d{4})-(\d{2})-(\d{2})[ T_](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?(?:Z|[+-]\d{2}:?\d{2})?\]?[\s:|-]*"
)
_GLOG_BR = re.compile(
    r"^\[([IWEF])(\d{1,2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s+(?:\d+\s+)?([\w./\-]+:\d+)\]\s?"
)
_GLOG = re.compile(r"^([IWEF])(\d{1,2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s+\d+\s+([\w./\-]+:\d+)\]\s?")
_OLD_C10D = re.compile(r"^\[([IWEF]) ([\w.\-]+:\d+)\]\s?")
# NCCL >= 2.3 prints "host:pid:tid [dev] NCCL INFO …"; NCCL 2.2 printed "host:pid:tid [dev] INFO …"
NCCL_HDR = re.compile(
    r"(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?=(?:[\w/.]+:\d+ )?(?:NCCL )?(?:INFO|WARN|TRACE|ERROR) )"
)


@dataclass
class Line:
    msg: str
    rank: int | None = None  # from [rankN]:
    local: int | None = None  # from [defaultN]: (torchrun --tee)
    time: float | None = None
    year_missing: bool = False  # glog times carry no year
    level: str | None = None
    source: str | None = None  # e.g. ProcessGroupNCCL.cpp:616
    nccl: dict | None = None  # {"host","pid","tid","dev"} of an NCCL line


def _frac(s: str | None) -> float:
    return float("0." + s) if s else 0.0


def epoch(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: float = 0.0) -> float | None:
    try:
        return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + frac
    except (ValueError, OverflowError):
        return None


def split(raw: str, default_year: int) -> Line:
    s = raw.rstrip("\r\n")
    ln = Line(s)
    c = s.lstrip()[:1]
    if not (c == "[" or c.isdigit() or c in "IWEF"):  # no prefix can start here: only NCCL headers
        m = NCCL_HDR.search(s) if (" NCCL " in s or " INFO " in s or " WARN " in s) else None
        if m:
            ln.nccl = {
                "host": m.group("host"),
                "pid": int(m.group("pid")),
                "tid": int(m.group("tid")),
                "dev": int(m.group("dev")),
            }
        return ln
    if s[:1].isspace() and _ISO.match(s.lstrip()):
        s = s.lstrip()
    for _ in range(6):  # prefixes can come in any order; a few rounds suffice
        c = s[:1]
        if c == "[":
            m = _TEE.match(s)
            if m and ln.local is None:
                ln.local = int(m.group(2))
                s = s[m.end() :]
                continue
            m = _RANKP.match(s)
            if m:
                ln.rank = int(m.group(1))
                s = s[m.end() :]
                continue
            m = _PASTE_NO.match(s)
            if m:
                s = s[m.end() :]
                continue
            m = _OLD_C10D.match(s)
            if m:
                ln.level, ln.source = m.group(1), m.group(2)
                s = s[m.end() :]
                continue
            m = _GLOG_BR.match(s)
        elif c.isdigit():
            m = None
        elif c in ("I", "W", "E", "F") and s[1:2].isdigit():
            m = _GLOG.match(s)
        else:
            break
        if m:
            ln.level = m.group(1)
            mo, d, h, mi, sec = (int(g) for g in m.groups()[1:6])
            t = epoch(default_year, mo, d, h, mi, sec, _frac(m.group(7)))
            if t is not None:  # glog's own clock wins over a pasted ISO prefix
                ln.time, ln.year_missing = t, True
            ln.source = m.group(8)
            s = s[m.end() :]
            continue
        m = _ISO.match(s) if (c == "[" or c.isdigit()) else None
        if m and ln.time is None:
            y, mo, d, h, mi, sec = (int(g) for g in m.groups()[:6])
            ln.time = epoch(y, mo, d, h, mi, sec, _frac(m.group(7)))
            s = s[m.end() :]
            continue
        break
    m = NCCL_HDR.search(s)
    if m:
        ln.nccl = {
            "host": m.group("host"),
            "pid": int(m.group("pid")),
            "tid": int(m.group("tid")),
            "dev": int(m.group("dev")),
        }
    ln.msg = s
    return ln


def split_nccl_segments(s: str) -> list[tuple[dict, str]]:
    """NCCL lines of several processes can be glued together in one line (interleaved output):
    one (header, message) per NCCL header found."""
    out = []
    ms = list(NCCL_HDR.finditer(s))
    for i, m in enumerate(ms):
        end = ms[i + 1].start() if i + 1 < len(ms) else len(s)
        hdr = {
            "host": m.group("host"),
            "pid": int(m.group("pid")),
            "tid": int(m.group("tid")),
            "dev": int(m.group("dev")),
        }
        out.append((hdr, s[m.end() : end].strip()))
    return out
