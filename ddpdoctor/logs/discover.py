"""Find log files (and Flight Recorder dumps) under the user's paths and tell their rank.

Rank from the path: ``rank3``, ``rank-3``, ``worker3`` in a name, torchrun's ``--log-dir``
layout ``attempt_0/<local_rank>/stdout.log``, or a folder named only by a number
(``logs/3/train.log``).  Lines can still override this (``[rank3]:`` prefixes, NCCL pids).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .. import safe_io
from ..bundle.inputs import walk
from ..errors import InputError

LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".stdout", ".stderr")
SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", "venv"}
MAX_LOG_BYTES = 256 * 1024 * 1024
_RANK_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker|proc)[-_.]?(\d+)(?!\d)", re.IGNORECASE)
_FR_NAME = re.compile(
    r"(?:nccl_trace_rank_|fr_trace|flight_?recorder|_trace_rank_?)\D*?(\d+)(?:\.pkl|\.pickle|\.json)?$", re.IGNORECASE
)
_PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_ATTEMPT = re.compile(r"^attempt_(\d+)$")


@dataclass
class LogFile:
    path: Path
    kind: str  # "text", "events" (events.jsonl), "flight_recorder"
    rank: int | None  # rank from the path, None when unknown
    rank_source: str  # "name", "log-dir", "folder", "none"
    local: bool = False  # True when the path rank is a local rank (torchrun log-dir)
    attempt: int | None = None


def _last(pattern, text: str):
    """The last match of ``pattern`` in ``text``, or None."""
    matches = list(pattern.finditer(text))
    return matches[-1] if matches else None


def _is_pickle(path: Path) -> bool:
    try:
        return safe_io.read_head(path, 2) in _PICKLE_MAGIC
    except (OSError, InputError):
        return False


def _is_json_data(path: Path) -> bool:
    """A .txt/.out file that holds JSON data (e.g. expected test outputs) is not a log."""
    try:
        head = safe_io.read_head(path, 4096).lstrip()
    except (OSError, InputError):
        return False
    if head[:1] not in (b"{", b"["):
        return False
    first = head.split(b"\n", 1)[0].strip()
    return first.endswith((b"}", b"]")) or len(first) >= 4000 or b'": ' in first[:200]


# A line any program log has and prose (a README, notes next to the logs) does not: a timestamp, a level,
# a rank prefix, an NCCL header, a traceback, an exception line, a progress line, torchrun's words.
_LOG_HINT = re.compile(
    r"\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d|^\s*\[?[IWEF]\d{4} \d\d:\d\d:\d\d|\d\d:\d\d:\d\d[.,]\d{3}|"
    r"\[(?:rank|default)\d+\]:|\[Rank \d+\]|^\S+:\d+:\d+ \[\d+\] (?:NCCL )?(?:INFO|WARN)|"
    r"Traceback \(most recent call last\)|^\s*File \".*\", line \d+|"
    r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Interrupt): |"
    r"^\s*(?:\[[^\]]*\]\s*)?(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b[\s:\]-]|"
    r"\b(?:step|iter|iteration|epoch)\s*[:=#]?\s*\[?\d+|\d+/\d+ \[\d+:\d+|\bloss\s*[:=]\s*\d|"
    r"exitcode|ChildFailedError|torch\.distributed|^usage: |: error: |NCCL (?:INFO|WARN)|Segmentation fault|Killed$",
    re.IGNORECASE | re.MULTILINE,
)
LOG_SNIFF_BYTES = 64 * 1024


def looks_like_log(path: Path) -> bool:
    """Decide by content: some line in the first 64 KiB reads like program output."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(LOG_SNIFF_BYTES)
    except OSError:
        return False
    return bool(_LOG_HINT.search(head.decode("utf-8", errors="replace")))


def _ambiguous(path: Path) -> bool:
    """A .txt/.md-like name that neither says "log" nor gives a rank: notes as often as a log."""
    name = path.name.lower()
    return name.endswith(".txt") and "log" not in name and rank_from_path(path)[0] is None


def classify(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith(".jsonl") and ("event" in name or "ddpdoctor" in name):
        return "events"
    if name == "error.json" and any(_ATTEMPT.match(p) for p in path.parts):
        return "error_file"  # torchrun's per-rank error file (@record)
    if _FR_NAME.search(path.name) and (_is_pickle(path) or name.endswith(".json")):
        return "flight_recorder"
    if (
        name.endswith(LOG_SUFFIXES)
        or (name.startswith("nccl") and ".log" in name)
        or name in ("stdout", "stderr", "output", "log")
    ):
        return None if _is_json_data(path) else "text"
    return None


def rank_from_path(path: Path) -> tuple[int | None, str, bool, int | None]:
    """(rank, source, is_local_rank, attempt) from a log file's path."""
    parts = path.parts
    attempt = None
    for i, part in enumerate(parts[:-1]):
        m = _ATTEMPT.match(part)
        if m and i + 1 < len(parts) - 1 and parts[i + 1].isdigit():
            attempt = int(m.group(1))
            return int(parts[i + 1]), "log-dir", True, attempt
    m = _last(_RANK_NAME, path.name)
    if m:
        return int(m.group(1)), "name", False, None
    fr = _FR_NAME.search(path.name)
    if fr:
        return int(fr.group(1)), "name", False, None
    parent = path.parent.name
    if parent.isdigit() and len(parent) <= 5:
        return int(parent), "folder", False, None
    m = _last(_RANK_NAME, parent)
    if m:
        return int(m.group(1)), "folder", False, None
    return None, "none", False, None


def describe(path: Path, kind: str) -> LogFile:
    rank, source, local, attempt = rank_from_path(path)
    return LogFile(path, kind, rank, source, local, attempt)


def find_log_files(paths: list[str]) -> list[Path]:
    """Log files, events.jsonl files and Flight Recorder dumps under ``paths`` (files given
    explicitly are always taken)."""
    return [f.path for f in find_logs(paths)]


def find_logs(paths: list[str], inputs=None) -> list[LogFile]:
    found: list[LogFile] = []
    for p in paths:
        path = Path(p)
        if not path.exists():
            raise InputError(f"{p}: no such file or directory")
        if path.is_file():
            kind = classify(path)
            if kind is None and not path.name.lower().endswith((".json", ".json.gz", ".gz")):
                kind = "text"
            if kind is not None:
                found.append(describe(path, kind))
            continue
        for root, _dirs, files in walk(path, inputs, SKIP_DIRS):
            for name in files:
                f = Path(root) / name
                kind = classify(f)
                if kind is None or (kind == "text" and _ambiguous(f) and not looks_like_log(f)):
                    continue  # not a log: a README or notes beside the logs
                try:
                    if f.stat().st_size > MAX_LOG_BYTES:
                        continue
                except OSError:
                    pass  # a loop or dangling link: reported as skipped when read
                found.append(describe(f, kind))
    seen, unique = set(), []
    for f in found:
        try:
            key = f.path.resolve()
        except (OSError, RuntimeError):
            key = f.path
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique
