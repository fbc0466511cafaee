"""The base facts of a rule folder (rules/<folder>/base_facts.toml): a real run's values of the facts
the folder's rules read, so that a stored ``[[test]]`` case states only what differs from a real run
(its ``[test.facts]``, and ``unset`` for base facts it does not have).

A base file is written from a recorded run's facts (tests/data/base_run.json, taken from a real run's
diagnosis JSON), never by hand:

    python -m ddpdoctor.rules_engine.make_base_facts tests/data/base_run.json

It keeps, for each folder, the facts its rules read as the run recorded them: facts recorded as null in a
``null = [...]`` list (TOML has no null), per-rank values as lists in rank order (as a case writes them),
and the source and the values set over the run's in the file's header.
"""

from __future__ import annotations

import json
import tomllib
from functools import lru_cache
from pathlib import Path

from ..fact_catalogue import default_catalogue
from .model import Rule, RuleError, key_line

BASE_FILE = "base_facts.toml"


@lru_cache(maxsize=64)
def load_base_facts(folder: Path) -> dict:
    """``[facts]`` of ``folder/base_facts.toml``, with the names of its ``null`` list as None ({} without
    a file); a name not in the fact catalogue is a RuleError naming the file and line."""
    path = Path(folder) / BASE_FILE
    if not path.is_file():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
        facts = tomllib.loads(text).get("facts")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RuleError(f"{path}: cannot read base facts ({exc})") from None
    nulls = tomllib.loads(text).get("null", [])
    if not isinstance(facts, dict) or not isinstance(nulls, list):
        raise RuleError(
            f'{path}:1: base facts are null = [names recorded as null] and a [facts] table of "dotted.name" = value'
        )
    facts = {**{n: None for n in nulls}, **facts}
    catalogue = default_catalogue()
    for name in facts:
        if name not in catalogue:
            raise RuleError(
                f"{path}:{key_line(text, name)}: unknown fact {name!r} (not in the fact catalogue rules/facts.toml)"
            )
    return dict(facts)


def rule_fact_names(rule: Rule) -> set[str]:
    """The dotted fact names a rule reads anywhere (conditions, evidence, texts, fix conditions)."""
    parts = [
        rule.when,
        rule.summary,
        rule.cost,
        rule.agreement,
        rule.confidence,
        rule.edge_value,
        rule.edge_threshold,
        rule.ranks,
        *rule.evidence.values(),
    ]
    for fx in rule.fixes:
        parts += [fx.title, fx.change, fx.applies_if, fx.value, fx.leads_if, fx.trails_if]
    names: set[str] = set()
    for p in parts:
        if p is not None:
            names |= set(p.names)
    return {n for n in names if "." in n and not n.startswith(("metrics.", "match."))}


def _as_case_value(value, ranks: list[int]):
    """A diagnosis JSON value as a case writes it: {"0": a, "1": b} of a rank.* fact becomes [a, b]."""
    if isinstance(value, dict) and ranks and set(value) == {str(r) for r in ranks}:
        return [value[str(r)] for r in ranks]
    return value


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value).__name__)


def _has_null(value) -> bool:
    if value is None:
        return True
    if isinstance(value, list):
        return any(_has_null(v) for v in value)
    if isinstance(value, dict):
        return any(_has_null(v) for v in value.values())
    return False


def base_text(facts: dict, names: set[str], source: str, overrides: dict) -> str:
    ranks = [int(r) for r in facts.get("run.ranks") or []]
    lines = [
        f"# Base facts of the [[test]] cases of this folder's rules: written by `{source}`",
        "# (docs/RULES.md, Testing rules). Regenerate rather than edit; a case states what differs.",
    ]
    if overrides:
        shown = ", ".join(f"{k} = {_toml_value(v)}" for k, v in overrides.items())
        lines.append(f"# Set over the run's values: {shown}")
    table, nulls = [], []
    for name in sorted(names):
        value = overrides.get(name, facts.get(name))
        value = _as_case_value(value, ranks) if name.startswith("rank.") else value
        if value is None and name in facts:
            nulls.append(name)
        elif (name in facts or name in overrides) and not _has_null(value):
            table.append(f"{json.dumps(name)} = {_toml_value(value)}")
    lines += [
        "# recorded as null (TOML has no null): by the run, or set so by the source's null list or --null",
        f"null = {_toml_value(nulls)}",
        "",
        "[facts]",
        *table,
    ]
    return "\n".join(lines) + "\n"
