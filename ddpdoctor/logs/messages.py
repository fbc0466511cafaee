"""Log lines → catalogued messages (rules/messages/, catalogue.py) → ``failure.message.*`` facts.

Every line read is searched with the catalogue's patterns (one combined regex picks the candidate lines
first). Of the messages found, the *cause* a rule shows is one whose role is ``cause``: the one on the
root-cause line if there is one, else the earliest. Its fix is rendered here, with the facts the run has
(bundle and logs) and the named groups of the pattern (``match.<group>``), so that the fix gives the
exact setting: the interface, the /dev/shm size, the device.  The NCCL version each host and rank
reports is collected here too (``nccl.versions*``): versions that differ are a finding even before
anything fails.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..expr import Missing
from .catalogue import Message, default_messages
from .model import LogEvent

_NAMED = re.compile(r"\(\?P<\w+>")
_NCCL_VERSION = re.compile(r"NCCL version:? ?(\d+\.\d+\.\d+)")
MAX_LINES = 2_000_000


def _scoped(pattern: str) -> str:
    """One pattern as a group of the combined regex: named groups unnamed, a leading (?i) made local."""
    body = _NAMED.sub("(?:", pattern)
    if body.startswith("(?i)"):
        return f"(?i:{body[4:]})"
    return f"(?:{body})"


@lru_cache(maxsize=1)
def _prefilter() -> re.Pattern:
    return re.compile("|".join(_scoped(p.pattern) for m in default_messages() for p in m.patterns))


def scan(lines) -> dict[str, dict]:
    """id -> {"count", "ranks", "first": (time, order, text, rank, groups, file, line_no)}."""
    pre, msgs = _prefilter(), default_messages()
    found: dict[str, dict] = {}
    for order, ln in enumerate(lines[:MAX_LINES]):
        file, no, text, rank, t = ln[0], ln[1], ln[2], ln[3], ln[4]
        if not pre.search(text):
            continue
        for msg in msgs:
            m = msg.match(text)
            if m is None:
                continue
            hit = found.setdefault(msg.id, {"count": 0, "ranks": set(), "first": None})
            hit["count"] += 1
            if rank is not None:
                hit["ranks"].add(rank)
            key = (t if t is not None else float("inf"), order)
            if hit["first"] is None or key < hit["first"][:2]:
                groups = {k: v for k, v in m.groupdict().items() if v is not None}
                hit["first"] = (key[0], order, text, rank, groups, file, no)
    return found


def versions(lines, by_host: dict[str, str]) -> dict:
    """The NCCL version each rank (torch's NCCL error and init lines) and each host (NCCL's own line) reports."""
    by_rank: dict[int, str] = {}
    for ln in lines[:MAX_LINES]:
        if ln[3] is not None and "NCCL version" in ln[2]:
            m = _NCCL_VERSION.search(ln[2])
            if m:
                by_rank.setdefault(ln[3], m.group(1))
    hosts = {
        h: _NCCL_VERSION.search("NCCL version " + v).group(1)
        for h, v in by_host.items()
        if _NCCL_VERSION.search("NCCL version " + v)
    }
    seen = sorted(set(by_rank.values()) | set(hosts.values()))
    return {
        "nccl.versions": seen,
        "nccl.versions_by_host": hosts,
        "nccl.versions_by_rank": {str(r): v for r, v in sorted(by_rank.items())},
        "nccl.versions_differ": len(seen) > 1,
    }


def _is_cause(m: Message, look) -> bool:
    if m.role == "cause":
        return True
    if m.cause_if is None:
        return False
    v = m.cause_if(look)
    return not isinstance(v, Missing) and bool(v)


def _primary(found: dict[str, dict], root_text: str | None, look) -> Message | None:
    causes = [m for m in default_messages() if m.id in found and _is_cause(m, look)]
    # a message that is itself the cause (role) before one that is the cause only by the run's facts (cause_if):
    # NCCL's WARN line naming the failed call before the error code it ends in
    for group in ([m for m in causes if m.role == "cause"], [m for m in causes if m.role != "cause"]):
        if not group:
            continue
        if root_text:
            on_root = [m for m in group if m.match(root_text)]
            if on_root:
                return on_root[0]
        return min(group, key=lambda m: found[m.id]["first"][:2])
    return None


class _Lookup:
    def __init__(self, facts: dict, groups: dict):
        self.facts, self.groups = facts, groups

    def __call__(self, name: str):
        if name.startswith("match.") and name[6:] in self.groups:
            return self.groups[name[6:]]
        v = self.facts.get(name)
        return Missing(frozenset({name})) if v is None else v


def cause_event(found: dict[str, dict]) -> LogEvent | None:
    """The earliest line of a message whose catalogue role is ``cause``, as failure evidence of its own (a
    log that holds only NCCL WARN lines and no Python error still failed for that cause): kind ``message``,
    its rank, time and line; ``data`` names the catalogue entry and its kind of cause."""
    causes = [m for m in default_messages() if m.id in found and m.role == "cause"]
    if not causes:
        return None
    msg = min(causes, key=lambda m: found[m.id]["first"][:2])
    t, _o, text, rank, _groups, file, no = found[msg.id]["first"]
    return LogEvent(
        kind="message",
        rank=rank,
        time=None if t == float("inf") else t,
        text=text.strip(),
        file=file,
        line_no=no,
        data={"id": msg.id, "cause_kind": msg.kind},
    )


def message_facts(lines, facts: dict, known: dict, found: dict[str, dict] | None = None) -> dict:
    found = scan(lines) if found is None else found
    order = sorted(found, key=lambda i: found[i]["first"][:2])
    out = {
        "failure.message.ids": order,
        "failure.message.id": None,
        "failure.message.family": None,
        "failure.message.kind": None,
        "failure.message.cause": None,
        "failure.message.fix_title": None,
        "failure.message.fix": None,
        "failure.message.rank": None,
        "failure.message.ranks": [],
        "failure.message.text": None,
        "failure.message.on_root": False,
        "failure.message.specific": False,
    }
    msg = _primary(found, facts.get("failure.root_cause.text"), _Lookup({**known, **facts}, {}))
    if msg is None:
        return out
    hit = found[msg.id]
    _t, _o, text, rank, groups, _file, _no = hit["first"]
    look = _Lookup({**known, **facts}, groups)
    title, _m1 = msg.fix_title.render(look)
    change, _m2 = msg.fix_change.render(look)
    root = facts.get("failure.root_cause.text")
    out.update(
        {
            "failure.message.id": msg.id,
            "failure.message.family": msg.family,
            "failure.message.kind": msg.kind,
            "failure.message.cause": msg.cause,
            # a fix that needs a value the run did not record is not offered (docs/DESIGN.md)
            "failure.message.fix_title": title.strip() if title is not None and change is not None else None,
            "failure.message.fix": change.strip("\n") if title is not None and change is not None else None,
            "failure.message.rank": rank,
            "failure.message.ranks": sorted(hit["ranks"]),
            "failure.message.text": text.strip()[:300],
            "failure.message.on_root": bool(root and msg.match(root)),
            "failure.message.specific": msg.specific,
        }
    )
    return out


def slowdown_facts(found: dict[str, dict], known: dict) -> dict:
    """logs.slowdown.*: the earliest performance warning of the catalogue (a context message with ``slows``)
    in the logs, with its fix rendered: torch saying what makes the step slow, for the rules of that part."""
    warned = [m for m in default_messages() if m.id in found and m.slows is not None]
    if not warned:
        return {}
    msg = min(warned, key=lambda m: found[m.id]["first"][:2])
    hit = found[msg.id]
    _t, _o, text, _rank, groups, _file, _no = hit["first"]
    look = _Lookup(dict(known), groups)
    title, _m1 = msg.fix_title.render(look)
    change, _m2 = msg.fix_change.render(look)
    if title is None or change is None:
        return {}
    return {
        "logs.slowdown.id": msg.id,
        "logs.slowdown.slows": msg.slows,
        "logs.slowdown.fix_title": title.strip(),
        "logs.slowdown.fix": change.strip("\n"),
        "logs.slowdown.text": _short_warning(text),
        "logs.slowdown.ranks": sorted(hit["ranks"]),
        "logs.slowdown.count": hit["count"],
    }


_DIRS = re.compile(r"(?:/[^\s/:]+)+/([^\s/:]+:\d+)")


def _short_warning(text: str) -> str:
    """A warning line for a report: the user's file:line without its directories, torch's own place cut off."""
    return _DIRS.sub(r"\1", text.split(" (Triggered internally at ")[0]).strip()[:300]
