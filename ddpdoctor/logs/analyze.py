"""``analyze_logs(paths)``: log files → LogAnalysis (events per rank, NCCL facts, failure facts)."""

from __future__ import annotations

import re
import time as _time
from dataclasses import dataclass, field

from .. import safe_io
from ..errors import InputError
from ..redact import SecretMemory, redact_keys
from .callsite import apply_callsite_root
from .causal import failure_facts, time_str
from .discover import LogFile, find_logs
from .exception_place import apply_exception_place
from .failfacts import promote_bad_interface, suspect_p2p
from .fatal_stack import apply_crash_place
from .flight import analyze_dumps, load_dump
from .hang import apply_blocked_root, apply_busy_root, hang_dumps, hang_facts
from .hostrec import fill_network_suggestion, host_records
from .interrupt import apply_interrupt
from .jsonl import parse_error_file, parse_events
from .messages import cause_event, message_facts, scan, slowdown_facts, versions
from .model import LogEvent, NcclFacts
from .nccl import NcclCollector
from .netfacts import nccl_facts
from .parse import FileParser
from .progress import apply_bundle_root, progress_facts
from .startup import apply_startup

_YEAR = re.compile(rb"\b(20\d\d)-[01]\d-[0-3]\d[ T_][0-2]\d:")
MAX_SEARCH_LINES = 2_000_000
QUIET_KINDS = {"progress", "nccl_warn", "net_setting"}


@dataclass
class LogAnalysis:
    files: list[str]
    ranks: list[int]
    events: list[LogEvent]
    nccl: NcclFacts
    facts: dict[str, object]
    flight_recorder: dict | None = None
    warnings: list[str] = field(default_factory=list)
    # (file, line_no, text, rank, time) of every line read, for search()
    lines: list[tuple] = field(default_factory=list, repr=False)

    def search(self, patterns: list[str]) -> dict:
        """Scan every log line with the regexes; count, ranks and the first (earliest) match."""
        rxs = [re.compile(p) for p in patterns]
        count, ranks, first = 0, set(), None
        for file, no, text, rank, t in self.lines:
            if any(rx.search(text) for rx in rxs):
                count += 1
                if rank is not None:
                    ranks.add(rank)
                if first is None or (t is not None and (first[4] is None or t < first[4])):
                    first = (file, no, text, rank, t)
        return {
            "count": count,
            "ranks": sorted(ranks),
            "first_rank": first[3] if first else None,
            "first_time": first[4] if first else None,
            "first_line": first[2] if first else None,
            "first_file": first[0] if first else None,
        }

    def timeline(self, rank: int | None = None, kinds: set[str] | None = None) -> list[LogEvent]:
        return [e for e in self.events if (rank is None or e.rank == rank) and (kinds is None or e.kind in kinds)]

    def failure_timeline(self, limit: int = 60) -> list[dict]:
        """The failure-related events per rank for a report: timed ones in time order, then the rest
        in file order; progress lines left out except each rank's last one."""
        last_progress = {}
        for e in self.events:
            if e.kind == "progress" and e.rank is not None:
                last_progress[e.rank] = e
        keep = set(map(id, last_progress.values()))
        out = []
        for e in self.events:
            if e.kind in QUIET_KINDS and id(e) not in keep:
                continue
            out.append(
                {
                    "rank": e.rank,
                    "time": e.time,
                    "time_str": time_str(e.time) if e.time is not None else None,
                    "kind": e.kind,
                    "text": e.text[:300],
                    "file": e.file,
                    "line_no": e.line_no,
                }
            )
        return out[:limit]

    def to_dict(self) -> dict:
        return {
            "files": self.files,
            "ranks": self.ranks,
            "facts": self.facts,
            "timeline": self.failure_timeline(),
            "warnings": self.warnings,
        }


def _default_year(files: list[LogFile]) -> int:
    for lf in files:
        try:
            m = _YEAR.search(safe_io.read_head(lf.path, 1 << 20))
        except (OSError, InputError):
            continue
        if m:
            return int(m.group(1))
    return _time.gmtime().tm_year


def _resolve(events: list[LogEvent], lines: list[list], nccl: NcclFacts, local_map: dict, hosts: set) -> None:
    """Give events whose rank is only known as a local rank or an NCCL process their global rank."""
    single_host = len(hosts | {h for h, _ in local_map}) <= 1 and (nccl.nnodes or 1) <= 1
    by_local: dict[int, int] = {}
    for (_h, loc), g in local_map.items():
        by_local.setdefault(loc, g)
    local_unique = len({h for h, _ in local_map}) <= 1

    def rank_of(pidkey, local):
        if pidkey is not None:
            if pidkey in nccl.pid_rank:
                return nccl.pid_rank[pidkey], "nccl comm"
            if single_host and pidkey in nccl.pid_dev:
                return nccl.pid_dev[pidkey], "cuda device (single host)"
        if local is not None:
            if local_unique and local in by_local:
                return by_local[local], "torchrun summary"
            if single_host:
                return local, "local rank (single host)"
        return None, None

    for e in events:
        pidkey, local = e.data.pop("_pidkey", None), e.data.pop("_local", None)
        if e.rank is None and (pidkey is not None or local is not None):
            e.rank, src = rank_of(pidkey, local)
            if src:
                e.data["rank_source"] = src
            if local is not None:
                e.data["local_rank"] = local
    for ln in lines:
        if ln[3] is None:
            ln[3] = rank_of(ln[5], ln[6])[0]


def _dedup(events: list[LogEvent]) -> list[LogEvent]:
    """The same line reached twice (torchrun --tee console copy + per-rank log file): keep one."""
    seen: dict[tuple, LogEvent] = {}
    out = []
    for e in events:
        key = (e.rank, e.kind, e.text)
        old = seen.get(key)
        if old is None:
            seen[key] = e
            out.append(e)
        elif old.time is None and e.time is not None:
            old.time = e.time
    return out


def _order(events: list[LogEvent]) -> list[LogEvent]:
    timed = sorted((e for e in events if e.time is not None), key=lambda e: e.time)
    return timed + [e for e in events if e.time is None]


def analyze_logs(
    paths: list[str],
    known_facts: dict | None = None,
    inputs=None,
    *,
    thresholds: dict | None = None,
    secrets: SecretMemory | None = None,
) -> LogAnalysis | None:
    """``thresholds``: the analysis's rules/metrics.toml (default: as shipped); ``secrets``: the analysis's
    memory of secret values, given the values the logs print under a secret name."""
    known = dict(known_facts or {})
    files = find_logs(paths, inputs)
    if not files:
        return None
    year = _default_year(files)
    coll = NcclCollector()
    events: list[LogEvent] = []
    lines: list[list] = []
    local_map: dict = {}
    hosts: set = set()
    dumps: dict[int, dict] = {}
    warnings: list[str] = []
    read: list[str] = []
    for lf in files:
        try:
            if lf.kind == "flight_recorder":
                d = load_dump(lf.path)
                if d is None:
                    warnings.append(f"{lf.path}: not a readable Flight Recorder dump")
                    continue
                rank = d.get("rank") if isinstance(d.get("rank"), int) else lf.rank
                dumps[rank if rank is not None else len(dumps)] = d
                read.append(str(lf.path))
                continue
            text = redact_keys(safe_io.read_log_text(lf.path, warnings))  # key material is never evidence
            if secrets is not None:  # a value the script printed under a secret name, hidden where echoed
                secrets.collect_log(text)
        except OSError as exc:
            warnings.append(f"{lf.path}: unreadable ({exc.strerror})")
            continue
        except InputError as exc:  # FIFO, device, loop, dangling link, unreadable: skipped
            warnings.append(f"skipped {exc}")
            continue
        read.append(str(lf.path))
        if lf.kind == "error_file":
            try:
                events.extend(parse_error_file(text, str(lf.path), lf.rank, lf.local))
            except InputError as exc:  # one unreadable record: the others are still read
                warnings.append(f"skipped {exc}")
            continue
        if lf.kind == "events":
            evs, lns = parse_events(text, str(lf.path), lf.rank, warnings)
            events.extend(evs)
            lines.extend([str(lf.path), no, t, r, tm, None, None] for no, t, r, _l, _p, tm in lns)
            continue
        parsed = FileParser(lf, year, coll).parse(text)
        events.extend(parsed.events)
        local_map.update(parsed.local_map)
        hosts |= parsed.hosts
        file_rank, file_local = (lf.rank, None) if not lf.local else (None, lf.rank)
        for no, t, r, loc, pk, tm in parsed.lines[:MAX_SEARCH_LINES]:
            if r is None and pk is None and loc is None:
                r, loc = file_rank, file_local
            lines.append([str(lf.path), no, t, r, tm, pk, loc])
    nccl = coll.finish()
    _resolve(events, lines, nccl, local_map, hosts)
    events = _order(_dedup(events))
    fr = None
    world = safe_io.sane_world_size(_world(known, nccl, events), "logs", warnings)
    if dumps:
        fr = analyze_dumps(dumps, world)
    facts = {"logs.present": True, "logs.files": read, "logs.file_count": len(read)}
    ranks = sorted({e.rank for e in events if e.rank is not None} | set(dumps))
    facts["logs.ranks"] = ranks
    facts["logs.world_size"] = world
    facts["logs.event_counts"] = _counts(events)
    facts["logs.has_timestamps"] = any(e.time is not None for e in events)
    found = scan(lines)  # the catalogue's messages (rules/messages/)
    facts.update(failure_facts(events, fr, world, cause_event(found), thresholds))
    apply_startup(facts, events, lines, world)  # the script never started: that is the cause
    facts.update(hang_facts(hang_dumps(paths), events, world))
    apply_busy_root(facts)
    apply_blocked_root(facts)
    facts.update(progress_facts(known, facts))  # the bundle's own record of each rank (logs/progress.py)
    apply_bundle_root(facts)
    facts.update(nccl_facts(nccl, known))
    fill_network_suggestion(facts, host_records(paths))
    suspect_p2p(facts, known)
    promote_bad_interface(facts)
    facts.update(versions(lines, nccl.versions_by_host))
    apply_exception_place(facts, events, lines)  # the user's file:line the root-cause exception was raised at
    facts.update(message_facts(lines, facts, known, found))
    facts.update(slowdown_facts(found, known))  # a performance warning torch printed while the job ran
    apply_callsite_root(facts, known, lines, events)  # a size mismatch between two call sites (logs/callsite.py)
    apply_crash_place(facts, lines)  # where a rank that died of a signal was (faulthandler's stacks)
    apply_interrupt(facts, known)  # Ctrl-C is not the failure to fix
    return LogAnalysis(
        read, ranks, events, nccl, facts, fr, warnings, [(f, no, t, r, tm) for f, no, t, r, tm, _pk, _loc in lines]
    )


def _world(known: dict, nccl: NcclFacts, events: list[LogEvent]) -> int | None:
    for key in ("run.world_size", "world_size", "manifest.world_size"):
        v = known.get(key)
        if isinstance(v, int) and v > 0:
            return v
    return nccl.nranks


def _counts(events: list[LogEvent]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        out[e.kind] = out.get(e.kind, 0) + 1
    return dict(sorted(out.items()))
