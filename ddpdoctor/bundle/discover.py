"""Find trace files under the user's paths and decide which rank each one is.

Rank comes from the trace's ``distributedInfo``; else from the file name (``rank-3``,
``rank3``, ``rank_3``, ``worker3``, …); a lone trace with neither is rank 0.  Several
files of one rank are profiling windows of one process (same pid): the latest is used
unless all are asked for.  Files are only read, never written.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from .. import safe_io, sources
from ..errors import InputError, NoTracesError
from ..trace.schema import DistributedInfo
from .inputs import walk

PEEK_BYTES = 256 * 1024


class OwnDocument(Exception):
    """describe() met a file ddpdoctor wrote itself."""


class RankOutOfRange(InputError):
    """A trace's distributedInfo names a rank outside its world (a negative rank, a world_size of 0 or
    less): the job's rank numbering is wrong, so the whole input is refused (README: exit 2), even
    when the file was found inside a folder beside good traces."""


class NotATrace(InputError):
    """describe() read a whole small JSON object with no 'traceEvents': some other file (a config, metrics,
    an expected-output fixture) beside the traces, not a trace of the job that could not be read."""


_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_.]?(\d+)(?!\d)", re.IGNORECASE)
_TIME_IN_NAME = re.compile(r"\.(\d{12,})\.pt\.trace")
_DIST_INFO = re.compile(rb'"distributedInfo"\s*:\s*(\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\})')
_ATTEMPT = re.compile(r"^attempt_\d+$")
_PID = re.compile(rb'"pid"\s*:\s*(\d+)')
_BASE_TIME = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
# ddpdoctor's own metadata files that live beside traces (bundles, synthetic sets): not traces
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".jsonl")
OWN_FILES = {"manifest.json", "truth.json", "facts.json", "report.json", "analysis.json", "settings.json"}
# folders of a `ddpdoctor run` bundle whose JSON files are not traces (hosts/<hostname>.json)
OWN_DIRS = {"hosts"}
# a file still being written, or left by a writer that stopped part-way (`rank0.pt.trace.json.gz.tmp.json`,
# `….json.part`, an editor's `~` or swap file): never a trace, whatever its name ends with
_TEMPORARY_NAME = re.compile(r"(?:\.(?:tmp|temp|part|partial|crdownload|swp)(?:\.[A-Za-z0-9]+)*|~)$", re.IGNORECASE)
NAMING_HELP = (
    "name each file after its rank (e.g. rank3.pt.trace.json or worker3.json) or record with "
    "torch.distributed initialized so the trace carries distributedInfo"
)


@dataclass
class TraceFile:
    path: Path | sources.RemoteFile  # a RemoteFile for URL inputs (s3://…, see sources.py)
    size: int
    rank: int | None
    rank_source: str  # "distributedInfo", "file name" or "none"
    world_size: int | None
    pid: int | None
    order_key: tuple  # later windows sort last

    @property
    def label(self) -> str:
        return str(self.path)


@dataclass
class Discovery:
    by_rank: dict[int, list[TraceFile]]  # selected windows per rank, oldest first
    skipped_windows: dict[int, list[TraceFile]]
    world_size: int | None
    warnings: list[str] = field(default_factory=list)
    chosen: str | None = None  # the --ranks SPEC that picked these ranks on purpose

    @property
    def ranks(self) -> list[int]:
        return sorted(self.by_rank)


def temporary_name(name: str) -> bool:
    """A temporary file's name (a trace being written when its process stopped), not a trace's."""
    return _TEMPORARY_NAME.search(name) is not None or name.startswith(".~")


def find_trace_files(paths: list[str], inputs=None, temporary: list | None = None) -> list[Path]:
    """The trace files under ``paths``; files with a temporary name found in a folder are left out (and added
    to ``temporary`` when given): a file named on the command line is always read."""
    found: list = []
    for p in paths:
        if sources.is_url(p):
            found.extend(_remote_traces(p))
            continue
        path = Path(p)
        if not path.exists():
            raise InputError(f"{p}: no such file or directory")
        if not path.is_dir():
            safe_io.check_regular(path)  # FIFO, device, loop, dangling link given directly: exit 2
            if path.name.endswith((".json", ".json.gz")) or not path.name.endswith(LOG_SUFFIXES):
                found.append(path)
            continue
        for root, _dirs, files in walk(path, inputs):
            for name in sorted(files):
                if temporary_name(name):
                    if temporary is not None and name.endswith((".json", ".gz")):
                        temporary.append(Path(root) / name)
                    continue
                if (
                    name.endswith((".json", ".json.gz"))
                    and name not in OWN_FILES
                    and not _in_own_dir(Path(root))
                    and not _torchrun_error_file(Path(root) / name)
                ):
                    found.append(Path(root) / name)  # FIFOs and the like: skipped with a warning in describe
    # the same file reached through two paths counts once
    seen, unique = set(), []
    for f in found:
        key = _resolve(f)  # a symlink loop: described (and skipped) later
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def _torchrun_error_file(path: Path) -> bool:
    """torchrun's per-rank ``attempt_N/<local rank>/error.json`` (@record): a log record, read by
    logs/, never a trace."""
    return path.name == "error.json" and any(_ATTEMPT.match(p) for p in path.parts[:-1])


def _remote_traces(url: str) -> list[sources.RemoteFile]:
    """The trace files of a URL input, chosen by the same names as in a local folder."""
    files = sources.list_files(url)
    if len(files) == 1 and files[0].given:
        f = files[0]
        return [f] if f.name.endswith((".json", ".json.gz")) or not f.name.endswith(LOG_SUFFIXES) else []
    manifests = {f.url.rsplit("/", 1)[0] for f in files if f.name == "manifest.json"}
    return [
        f
        for f in files
        if f.name.endswith((".json", ".json.gz"))
        and f.name not in OWN_FILES
        and not (f.folder_name in OWN_DIRS and f.url.rsplit("/", 2)[0] in manifests)
    ]


def _in_own_dir(folder: Path) -> bool:
    """hosts/ of a `ddpdoctor run` bundle (beside its manifest.json)."""
    return folder.name in OWN_DIRS and (folder.parent / "manifest.json").is_file()


def peek(path: Path) -> tuple[bytes, bool]:
    """The first bytes of a (possibly gzipped) file, and whether it is gzip."""
    if isinstance(path, sources.RemoteFile):
        head = sources.read_range(path, 0, PEEK_BYTES)
    else:
        head = safe_io.read_head(path, PEEK_BYTES)
    if head[:2] != b"\x1f\x8b":
        return head, False
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        return d.decompress(head, PEEK_BYTES), True
    except zlib.error as exc:
        raise InputError(f"{path}: corrupt gzip ({exc})") from None


def rank_from_name(path: Path) -> int | None:
    matches = list(_RANK_IN_NAME.finditer(path.name))  # the last number that looks like a rank
    return int(matches[-1].group(1)) if matches else None


_OWN_DOCUMENT = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"ddpdoctor\.')


def is_own_document(head: bytes) -> bool:
    """A diagnosis, comparison or trial that ddpdoctor wrote (any file name): an output, not an input."""
    return _OWN_DOCUMENT.match(head) is not None


def describe(path: Path) -> TraceFile:
    head, gz = peek(path)
    if is_own_document(head):
        raise OwnDocument(path)
    text = head.lstrip()
    if not text:
        raise InputError(f"{path}: empty file")
    if text[:1] not in (b"{", b"["):
        raise InputError(f"{path}: not JSON (a Kineto trace is a JSON object with 'traceEvents')")
    if text[:1] == b"{" and b'"traceEvents"' not in head and len(head) < PEEK_BYTES and not gz:
        try:
            msgspec.json.decode(head)  # the whole file: a JSON document of its own
        except msgspec.DecodeError:
            raise InputError(f"{path}: not valid JSON, and no 'traceEvents' (a cut or damaged file)") from None
        except RecursionError:
            raise InputError(f"{path}: JSON nested too deeply") from None
        raise NotATrace(f"{path}: JSON is not a profiler trace (no 'traceEvents')")
    info = None
    m = _DIST_INFO.search(head)
    if m is None and not gz:
        size = path.size if isinstance(path, sources.RemoteFile) else path.stat().st_size
        if size > PEEK_BYTES and isinstance(path, sources.RemoteFile):
            m = _DIST_INFO.search(sources.read_range(path, size - 64 * 1024, size))
        elif size > PEEK_BYTES:
            with safe_io.open_regular(path) as fh:
                fh.seek(size - 64 * 1024)
                m = _DIST_INFO.search(fh.read())
    if m is not None:
        try:
            info = msgspec.json.decode(m.group(1), type=DistributedInfo)
        except (msgspec.DecodeError, msgspec.ValidationError):
            info = None
    rank = _int(info.rank) if info else None
    raw_world = _int(info.world_size) if info else None
    if rank is not None and (rank < 0 or (raw_world is not None and raw_world <= 0)):
        raise RankOutOfRange(
            f"rank {rank} is out of range for world_size {raw_world} ({path})"
            if raw_world is not None
            else f"{path}: negative rank {rank} in distributedInfo"
        )
    source = "distributedInfo" if rank is not None else "none"
    if rank is None:
        rank = rank_from_name(path)
        source = "file name" if rank is not None else "none"
    pid_m = _PID.search(head)
    base = _BASE_TIME.search(head)
    tm = _TIME_IN_NAME.search(path.name)
    size, mtime_ns = (path.size, path.mtime_ns) if isinstance(path, sources.RemoteFile) else _size_mtime(path)
    order = (int(tm.group(1)) if tm else 0, int(base.group(1)) if base else 0, mtime_ns)
    world = safe_io.sane_world_size(info.world_size, str(path)) if info else None
    return TraceFile(path, size, rank, source, world, int(pid_m.group(1)) if pid_m else None, order)


def _size_mtime(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _beside(f, paths: list[str]) -> str:
    """A file by its name inside the given folder it was found in (short enough for the card), else as is."""
    if not isinstance(f, sources.RemoteFile):
        for p in paths:
            if not sources.is_url(p) and Path(p).is_dir():
                try:
                    return f"{Path(f).relative_to(p)} (in {p})"
                except ValueError:
                    continue
    return str(f)


def _resolve(p):
    if isinstance(p, sources.RemoteFile):
        return p.url
    try:
        return p.resolve()
    except (OSError, RuntimeError):
        return p


def parse_ranks(spec: str) -> list[int]:
    """`--ranks` SPEC: rank numbers and inclusive ranges, comma-separated ("0-7,512,1020-1023")."""
    out: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise InputError(
                f"--ranks {spec}: {part or 'an empty item'} is not a rank or a range "
                "(rank numbers and ranges, e.g. 0-7,512,1020-1023)"
            )
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise InputError(f"--ranks {spec}: the range {part} runs backwards")
        if hi - lo >= 1 << 20:
            raise InputError(f"--ranks {spec}: the range {part} is larger than any world size believed (2^20)")
        out.update(range(lo, hi + 1))
    return sorted(out)


def _choose(by_rank: dict, skipped: dict, spec: str, warnings: list[str]) -> None:
    """Keep only the ranks --ranks asked for (in place); the others are not decoded at all."""
    wanted = parse_ranks(spec)
    present = sorted(set(wanted) & set(by_rank))
    if not present:
        raise InputError(
            f"--ranks {spec}: no trace for any of those ranks (the traces hold ranks {compact_ranks(sorted(by_rank))})"
        )
    absent = sorted(set(wanted) - set(by_rank))
    if absent:
        warnings.append(f"--ranks {spec}: no trace for rank{'s' if len(absent) > 1 else ''} {compact_ranks(absent)}")
    for r in [r for r in by_rank if r not in present]:
        del by_rank[r]
        skipped.pop(r, None)


def _where(paths: list[str]) -> str:
    """'under FOLDER' for folders, 'among FILE' for files given by name (a log is not a folder)."""
    folders = [p for p in paths if sources.is_url(p) or Path(p).is_dir()]
    files = [p for p in paths if p not in folders]
    return " and ".join(
        ([f"under {', '.join(folders)}"] if folders else []) + ([f"among {', '.join(files)}"] if files else [])
    )


def _temporary_warning(f: Path, paths: list[str]) -> str:
    rank = rank_from_name(f)
    whose = f"rank {rank}'s trace" if rank is not None else "a trace"
    return (
        f"ignored {_beside(f, paths)}: a temporary file ({whose} was being written when its process stopped), "
        "not a complete trace"
    )


def discover(paths: list[str], all_windows: bool = False, inputs=None, ranks: str | None = None) -> Discovery:
    temporary: list[Path] = []
    files = find_trace_files(paths, inputs, temporary)
    explicit = {_resolve(Path(p)) for p in paths if not sources.is_url(p) and not Path(p).is_dir()}
    explicit |= {str(f) for f in files if isinstance(f, sources.RemoteFile) and f.given}
    if not files:
        if temporary:
            rank = rank_from_name(temporary[0])
            raise NoTracesError(
                f"no complete trace {_where(paths)}: {f'rank {rank}' if rank is not None else 'a process'} "
                f"stopped while writing its trace ({_beside(temporary[0], paths)} is a temporary file)"
            )
        raise NoTracesError(f"no trace files (*.json, *.json.gz) {_where(paths)}")
    warnings: list[str] = [_temporary_warning(f, paths) for f in temporary]
    described: list[TraceFile] = []
    errors: list[str] = []
    others: list = []
    for f in files:
        try:
            described.append(describe(f))
        except OwnDocument:
            if _resolve(f) in explicit:
                raise InputError(
                    f"{f}: a ddpdoctor output (diagnosis, comparison or trial), not a profiler "
                    "trace: give the run's folder or its traces"
                ) from None
            continue  # our own output beside the traces: not an input
        except RankOutOfRange:
            raise  # the job's numbering is wrong: refused whole
        except NotATrace as exc:
            if _resolve(f) in explicit:
                raise
            others.append((f, str(exc)))
        except InputError as exc:
            if _resolve(f) in explicit:
                raise
            errors.append(str(exc))
    if not described and not errors and others:
        errors = [e for _, e in others]  # nothing but other JSON: say what was found
    if not described and not errors:
        raise NoTracesError(f"no trace files {_where(paths)}: only ddpdoctor's own outputs")
    if not described:
        more = (
            f" (and {len(errors) - 1} more unreadable file{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        )
        raise NoTracesError(f"no readable profiler trace: {errors[0]}{more}")
    warnings.extend(f"skipped {e}" for e in errors)
    # not "skipped": another file beside the traces leaves the job's traces whole (not partial)
    warnings.extend(
        f"ignored {_beside(f, paths)}: JSON, but not a profiler trace (no 'traceEvents')" for f, _ in others
    )
    unranked = [t for t in described if t.rank is None]
    if unranked:
        if len(described) == 1:
            t = described[0]
            t.rank, t.rank_source = 0, "single trace"
        else:
            raise InputError(f"{unranked[0].path}: cannot tell which rank this trace is: {NAMING_HELP}")
    groups: dict[int, list[TraceFile]] = {}
    for t in described:
        if t.rank is not None:  # every trace has one by now (or the error above was raised)
            groups.setdefault(t.rank, []).append(t)
    by_rank, skipped = {}, {}
    for rank, group in groups.items():
        group.sort(key=lambda t: t.order_key)
        pids = {t.pid for t in group if t.pid is not None}
        if len(pids) > 1:
            listing = "; ".join(f"{t.path} (pid {t.pid})" for t in group)
            raise InputError(f"rank {rank} has traces from different runs: {listing}. Analyze one run at a time")
        by_rank[rank] = group if all_windows else group[-1:]
        skipped[rank] = [] if all_windows else group[:-1]
    sizes = {t.world_size for t in described if t.world_size}
    world = max(sizes) if sizes else None
    if len(sizes) > 1:
        warnings.append(f"traces disagree on world_size ({sorted(sizes)}): using {world}")
    if world:
        bad = [r for r in by_rank if r >= world]
        if bad:
            raise InputError(f"rank {bad[0]} is out of range for world_size {world} ({by_rank[bad[0]][0].path})")
    recorded = len(by_rank)
    if ranks is not None:
        _choose(by_rank, skipped, ranks, warnings)
        warnings.append(
            f"analyzed {len(by_rank)} of {world or recorded} ranks on purpose (--ranks {ranks}); the "
            "others were not read — cross-rank results, stragglers included, cover these ranks only "
            "(partial)"
        )
    elif world:
        missing = sorted(set(range(world)) - set(by_rank))
        if missing and len(by_rank) > 1:
            warnings.append(
                f"world_size is {world} but traces cover {len(by_rank)} ranks; missing: "
                f"{compact_ranks(missing)} — cross-rank results cover the ranks present (partial)"
            )
    return Discovery(by_rank, skipped, world, warnings, chosen=ranks)


def compact_ranks(nums: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] as '0-2, 5, 7-8'."""
    out, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ", ".join(out)
