"""The message catalogue (rules/messages/*.toml): what torch.distributed, the DataLoader, NCCL and gloo can
say, each message with its patterns, the kind of root cause, the cause in words, the fix (a template over
facts and the pattern's named groups) and real excerpts.  docs/MESSAGES.md describes the format.

Checked at load like rules: an unknown key or fact, a pattern that matches none of the entry's excerpts
(or an entry without an excerpt), an entry without a fix, a duplicate id: a :class:`CatalogueError`
(an InputError: one line ``<file>: <entry>: <what>``, exit 2).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import InputError
from ..expr import ExprError, compile_expr
from ..fact_catalogue import default_catalogue
from ..resources import rules_dir
from ..template import Template, Variant, VariantTemplate, compile_template

KINDS = (
    "code",
    "launch",
    "config",
    "resources",
    "container",
    "network",
    "hardware",
    "driver",
    "version",
    "data",
    "symptom",
)
ROLES = ("cause", "symptom", "context")
# the part of the step a context warning's cause makes slow (a performance warning torch prints while the job
# runs: the rules of that part lead with its fix, logs/messages.py slowdown_facts)
SLOWS = ("input", "compute", "communication")
FILE_KEYS = {"family", "title", "sources", "message"}
ENTRY_KEYS = {
    "id",
    "patterns",
    "parse",
    "kind",
    "role",
    "cause",
    "needs",
    "fix",
    "excerpt",
    "specific",
    "cause_if",
    "slows",
}
FIX_KEYS = {"title", "change"}
ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


class CatalogueError(InputError):
    """A message-catalogue file is malformed (names the file and the entry)."""


@dataclass
class Excerpt:
    text: str
    source: str
    real: bool  # quoted from a public thread (source is its URL), else built from the source file


@dataclass
class Message:
    id: str
    family: str
    patterns: list[re.Pattern]
    kind: str
    role: str
    cause: str
    fix_title: Template
    fix_change: Template | VariantTemplate
    needs: list[str]
    excerpts: list[Excerpt]
    specific: bool = True  # the fix names this message's own remedy (not "read the log")
    path: str = ""
    cause_if: object = None  # an expression over facts: a context/symptom message that is the cause when it holds
    # the wording the log parser reads by id to build its own event (logs/patterns.py), with the named groups it
    # reads; the message engine searches `patterns` only (an entry with no patterns is evidence through the
    # parser's event alone)
    parse: list[re.Pattern] = field(default_factory=list)
    slows: str | None = None  # a performance warning: the part of the step it makes slow (SLOWS)

    def match(self, text: str) -> re.Match | None:
        for p in self.patterns:
            m = p.search(text)
            if m:
                return m
        return None

    @property
    def groups(self) -> set[str]:
        return {g for p in self.patterns for g in p.groupindex}


@dataclass
class Family:
    name: str
    title: str
    sources: list[str]
    path: str
    messages: list[Message] = field(default_factory=list)


def _fail(path: Path, entry: str | None, what: str):
    raise CatalogueError(f"{path}: {entry + ': ' if entry else ''}{what}")


def _names_ok(path: Path, mid: str, names, groups: set[str], what: str) -> None:
    cat = default_catalogue()
    for n in sorted(names):
        if n.startswith("match.") and n[6:] in groups:
            continue
        if n.startswith("match."):
            _fail(path, mid, f"{what} reads {n!r}, but no pattern has a group (?P<{n[6:]}>…)")
        if n not in cat:
            _fail(path, mid, f"{what} reads unknown fact {n!r} (not in rules/facts.toml)")


def _template(path: Path, mid: str, src, groups: set[str], what: str):
    try:
        if isinstance(src, str):
            t = compile_template(src)
        elif (
            isinstance(src, list)
            and src
            and all(
                isinstance(v, dict) and isinstance(v.get("text"), str) and not set(v) - {"text", "when"} for v in src
            )
        ):
            t = VariantTemplate(
                [[Variant(compile_expr(v["when"]) if "when" in v else None, compile_template(v["text"])) for v in src]]
            )
        else:
            _fail(path, mid, f"{what} is a string or a list of {{when, text}} variants")
    except ExprError as exc:
        _fail(path, mid, f"{what}: {exc}")
    _names_ok(path, mid, t.names, groups, what)
    return t


def _regexes(path: Path, mid: str, raw: dict, key: str) -> list[re.Pattern]:
    """An entry's `patterns` or `parse`: a list of regexes, an inline flag only opening one."""
    if key not in raw:
        return []
    pats = raw[key]
    if not isinstance(pats, list) or not pats or not all(isinstance(p, str) for p in pats):
        _fail(path, mid, f"needs {key} = ['regex', …]")
    if any(re.search(r"\(\?[aiLmsux]+\)", p[1:]) for p in pats):
        _fail(path, mid, "an inline flag such as (?i) may only open a pattern")
    try:
        return [re.compile(p) for p in pats]
    except re.error as exc:
        _fail(path, mid, f"bad pattern: {exc}")


def _entry(path: Path, family: str, raw) -> Message:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not ID_PATTERN.match(raw["id"]):
        _fail(path, None, f"an entry without a dotted lower-case id: {str(raw)[:80]}")
    mid = raw["id"]
    extra = set(raw) - ENTRY_KEYS
    if extra:
        _fail(path, mid, f"unknown key(s) {', '.join(sorted(extra))} (allowed: {', '.join(sorted(ENTRY_KEYS))})")
    compiled, parse = _regexes(path, mid, raw, "patterns"), _regexes(path, mid, raw, "parse")
    if not compiled and not parse:
        _fail(path, mid, "needs patterns = ['regex', …] (or parse = [...], the wording the log parser reads)")
    for key, allowed in (("kind", KINDS), ("role", ROLES)):
        if raw.get(key) not in allowed:
            _fail(path, mid, f"{key} must be one of {', '.join(allowed)} (got {raw.get(key)!r})")
    if not isinstance(raw.get("cause"), str) or not raw["cause"].strip():
        _fail(path, mid, 'needs cause = "…" (the cause in words)')
    fix = raw.get("fix")
    if not isinstance(fix, dict) or not fix.get("title") or not fix.get("change"):
        _fail(path, mid, "an entry without a fix ([message.fix] with title and change)")
    if set(fix) - FIX_KEYS:
        _fail(path, mid, f"fix: unknown key(s) {', '.join(sorted(set(fix) - FIX_KEYS))}")
    needs = raw.get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        _fail(path, mid, "needs = ['fact.name', …]")
    groups = {g for p in compiled for g in p.groupindex}
    _names_ok(path, mid, needs, groups, "needs")
    title = _template(path, mid, fix["title"], groups, "fix.title")
    change = _template(path, mid, fix["change"], groups, "fix.change")
    exs = raw.get("excerpt")
    if not isinstance(exs, list) or not exs:
        _fail(path, mid, "needs at least one [[message.excerpt]] (text, source)")
    excerpts = []
    for ex in exs:
        if (
            not isinstance(ex, dict)
            or not isinstance(ex.get("text"), str)
            or not isinstance(ex.get("source"), str)
            or set(ex) - {"text", "source"}
        ):
            _fail(path, mid, "each excerpt has text and source (a thread's URL, or REPO@TAG:path)")
        excerpts.append(Excerpt(ex["text"], ex["source"], ex["source"].startswith("https://")))
    for p in compiled + parse:
        if not any(p.search(line) for ex in excerpts for line in ex.text.splitlines()):
            _fail(path, mid, f"pattern {p.pattern!r} matches no line of its excerpts (a pattern without an excerpt)")
    for ex in excerpts:
        if not any(p.search(line) for p in compiled + parse for line in ex.text.splitlines()):
            _fail(path, mid, f"no pattern finds the excerpt {ex.text[:60]!r}")
    cause_if = None
    if "cause_if" in raw:
        try:
            cause_if = compile_expr(str(raw["cause_if"]))
        except ExprError as exc:
            _fail(path, mid, f"cause_if: {exc}")
        _names_ok(path, mid, cause_if.names, groups, "cause_if")
    slows = raw.get("slows")
    if slows is not None and (slows not in SLOWS or raw["role"] != "context"):
        _fail(path, mid, f"slows must be one of {', '.join(SLOWS)}, on a context message (got {slows!r})")
    return Message(
        mid,
        family,
        compiled,
        raw["kind"],
        raw["role"],
        raw["cause"].strip(),
        title,
        change,
        needs,
        excerpts,
        bool(raw.get("specific", True)),
        str(path),
        cause_if,
        parse,
        slows,
    )


def load_family(path: Path) -> Family:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        _fail(path, None, f"unreadable: {exc}")
    except tomllib.TOMLDecodeError as exc:
        _fail(path, None, f"not valid TOML: {exc}")
    extra = set(data) - FILE_KEYS
    if extra:
        _fail(path, None, f"unknown key(s) {', '.join(sorted(extra))} (allowed: {', '.join(sorted(FILE_KEYS))})")
    if not isinstance(data.get("family"), str) or data["family"] != path.stem:
        _fail(path, None, f"family = {path.stem!r} (the file's name) is required")
    if not isinstance(data.get("sources"), list) or not data["sources"]:
        _fail(path, None, "sources = ['REPO@TAG:path', …] (the source files the strings were read from)")
    fam = Family(data["family"], str(data.get("title", data["family"])), list(data["sources"]), str(path))
    for raw in data.get("message", []):
        fam.messages.append(_entry(path, fam.name, raw))
    if not fam.messages:
        _fail(path, None, "no [[message]] entries")
    return fam


def load_catalogue(folder: Path | None = None) -> list[Family]:
    folder = folder or rules_dir() / "messages"
    fams = [load_family(p) for p in sorted(folder.glob("*.toml"))]
    seen: dict[str, str] = {}
    for fam in fams:
        for m in fam.messages:
            if m.id in seen:
                _fail(Path(fam.path), m.id, f"id also used in {seen[m.id]}")
            seen[m.id] = fam.path
    return fams


@lru_cache(maxsize=1)
def default_messages() -> tuple[Message, ...]:
    return tuple(m for fam in load_catalogue() for m in fam.messages)


def message_patterns(msg_id: str, parse: bool = False) -> list[str]:
    """The patterns of one built-in entry (`parse`: the wording the log parser reads instead, with the groups it
    reads): where the parser needs a message's wording, it takes it from here."""
    for m in default_messages():
        if m.id == msg_id:
            return [p.pattern for p in (m.parse if parse else m.patterns)]
    raise KeyError(f"no message {msg_id!r} in rules/messages/")


def message_by_id(msg_id: str) -> Message | None:
    """One built-in entry by its id (None when there is none)."""
    return next((m for m in default_messages() if m.id == msg_id), None)
