"""The fact catalogue (rules/facts.toml): every fact name a rule may read, with its type,
scope (one value per run, per rank or per (rank, step) row), unit, source and meaning.

The rule loader refuses a rule or a stored rule test that reads a name not in it
(rules_engine/model.py); tests/test_fact_catalogue.py checks that every fact the
producers give is in it, and that every entry is produced; docs/FACTS.md is rendered
from it by :func:`markdown` (``ddpdoctor rules facts --markdown``).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import InputError
from .resources import rules_dir

TYPES = {"bool", "int", "float", "str", "list", "dict"}
SCOPES = ("run", "rank", "step")
SOURCES = ("trace", "bundle", "logs", "derived")
PER_RANK = ".per_rank"
_PLACEHOLDER = re.compile(r"<([a-z_]+)>")
_KEYS = {"type", "scope", "unit", "source", "meaning", "per_rank", "not_produced"}


@dataclass(frozen=True)
class FactSpec:
    name: str  # as written in the catalogue (may hold a <placeholder>)
    type: str
    scope: str
    source: str
    meaning: str
    unit: str = ""
    per_rank: bool = False  # a "<name>.per_rank" dict (rank -> value) may come with it
    not_produced: str = ""  # why no producer gives it on the inputs the tests run


@dataclass
class Catalogue:
    specs: dict[str, FactSpec]  # catalogue name -> spec
    placeholders: dict[str, list[str]]
    path: str = ""

    def __post_init__(self):
        self._exact: dict[str, FactSpec] = {}
        for spec in self.specs.values():
            for name in self.expand(spec.name):
                self._exact[name] = spec

    def expand(self, pattern: str) -> list[str]:
        m = _PLACEHOLDER.search(pattern)
        if not m:
            return [pattern]
        return [
            n for v in self.placeholders[m.group(1)] for n in self.expand(pattern[: m.start()] + v + pattern[m.end() :])
        ]

    def lookup(self, name: str) -> FactSpec | None:
        """The entry that names ``name`` (``X.per_rank`` is named by X when X has per_rank)."""
        spec = self._exact.get(name)
        if spec is None and name.endswith(PER_RANK):
            base = self._exact.get(name[: -len(PER_RANK)])
            if base is not None and base.per_rank:
                return base
        return spec

    def __contains__(self, name: str) -> bool:
        return self.lookup(name) is not None

    def names(self) -> list[str]:
        return sorted(self._exact)


class CatalogueError(InputError):
    """rules/facts.toml is malformed."""


def _spec(path: Path, name: str, raw, placeholders: dict) -> FactSpec:
    where = f"{path}: fact {name!r}"
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: must be a table")
    unknown = set(raw) - _KEYS
    if unknown:
        raise CatalogueError(f"{where}: unknown keys {sorted(unknown)} (allowed: {', '.join(sorted(_KEYS))})")
    for ph in _PLACEHOLDER.findall(name):
        if ph not in placeholders:
            raise CatalogueError(f"{where}: no [placeholders] {ph}")
    types = str(raw.get("type", "")).split("|")
    if not all(t in TYPES for t in types):
        raise CatalogueError(f"{where}: type {raw.get('type')!r} is not one of {sorted(TYPES)} (or a|b)")
    if raw.get("scope") not in SCOPES:
        raise CatalogueError(f"{where}: scope {raw.get('scope')!r} is not one of {', '.join(SCOPES)}")
    if raw.get("source") not in SOURCES:
        raise CatalogueError(f"{where}: source {raw.get('source')!r} is not one of {', '.join(SOURCES)}")
    if not str(raw.get("meaning", "")).strip():
        raise CatalogueError(f"{where}: needs a meaning")
    return FactSpec(
        name=name,
        type=raw["type"],
        scope=raw["scope"],
        source=raw["source"],
        meaning=str(raw["meaning"]).strip(),
        unit=str(raw.get("unit", "")),
        per_rank=bool(raw.get("per_rank", False)),
        not_produced=str(raw.get("not_produced", "")),
    )


def load_catalogue(path: Path | str | None = None) -> Catalogue:
    if path is None:
        return default_catalogue()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CatalogueError(f"{path}: cannot read the fact catalogue ({exc})") from None
    placeholders = data.pop("placeholders", {})
    specs = {name: _spec(path, name, raw, placeholders) for name, raw in data.items()}
    return Catalogue(specs, placeholders, str(path))


@lru_cache(maxsize=1)
def default_catalogue() -> Catalogue:
    return load_catalogue(rules_dir() / "facts.toml")


def markdown(cat: Catalogue) -> str:
    """docs/FACTS.md: one table per source, names in order."""
    titles = {
        "trace": "From the traces",
        "bundle": "From a `ddpdoctor run` bundle",
        "logs": "From the logs (details: docs/FACTS_LOGS.md)",
        "derived": "Derived from other facts",
    }
    out = [
        "# Facts rules can read",
        "",
        "Generated from rules/facts.toml by `ddpdoctor rules facts --markdown > docs/FACTS.md`; "
        "do not edit by hand (tests/test_fact_catalogue.py fails when this file is stale).",
        "",
        "A rule, or a stored rule test, that reads a name not listed here is refused when the rules "
        "load (exit 2, naming the fact, the file and the line). Scope: `run` = one value; `rank` = one "
        "value per rank; `step` = one value per (rank, step) row. *per_rank*: a `<name>.per_rank` "
        "dict (rank → value) comes with it when ranks differ.",
        "",
        "Besides these facts a rule reads its own params and evidence (bare words), `match.count`, "
        "`match.ranks`, `match.first_rank`, `match.first_time`, `match.first_line`, `match.first_file` "
        "when it has a `[log]` table, and `metrics.<section>.<name>`, the thresholds of rules/metrics.toml "
        "after `--set metrics.…` and config overrides (docs/RULES.md#settings).",
        "",
    ]
    for ph, values in cat.placeholders.items():
        out.append(f"`<{ph}>` stands for each of: " + ", ".join(f"`{v}`" for v in values) + ".")
    for source in SOURCES:
        specs = sorted((s for s in cat.specs.values() if s.source == source), key=lambda s: s.name)
        if not specs:
            continue
        out += ["", f"## {titles[source]}", "", "| name | type | scope | unit | meaning |", "|---|---|---|---|---|"]
        for s in specs:
            extra = " *per_rank*" if s.per_rank else ""
            note = f" (not produced: {s.not_produced})" if s.not_produced else ""
            meaning = (s.meaning + note).replace("|", "\\|").replace("\n", " ")
            out.append(f"| `{s.name}`{extra} | {s.type.replace('|', ' or ')} | {s.scope} | {s.unit} | {meaning} |")
    return "\n".join(out) + "\n"
