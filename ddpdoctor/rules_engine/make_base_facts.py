"""Write rules/<folder>/base_facts.toml (see basefacts.py) from a recorded run:

    python -m ddpdoctor.rules_engine.make_base_facts tests/data/base_run.json

The input is a base-run file ({"run": how it was recorded, "facts": the run's facts as the diagnosis JSON
gives them, "set": {name: value} put over them, "null": [names] set to null}) or a diagnosis JSON
(``ddpdoctor analyze … --json``, with ``--set name=TOML-value`` / ``--null name`` on the command line).
Each folder of built-in rules gets the facts its rules read; a move of rules to another folder is followed by
running this again, which gives the new folder the same values."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

from .basefacts import BASE_FILE, base_text, rule_fact_names

USAGE = (
    "usage: python -m ddpdoctor.rules_engine.make_base_facts BASE_RUN_OR_DIAGNOSIS.json [--set name=VALUE …] "
    "[--null name …]"
)


def _options(args: list[str], overrides: dict, nulls: list) -> str | None:
    """Apply --set / --null; the problem, if any."""
    while args:
        flag, item, *args = args + [""] if len(args) == 1 else args
        name, eq, value = item.partition("=")
        if flag == "--null" and item:
            nulls.append(item)
        elif flag == "--set" and eq:
            overrides[name] = tomllib.loads(f"v = {value}")["v"]
        else:
            return f"not --set name=VALUE or --null name: {flag} {item}"
    return None


def write_all(source_file: Path, args: list[str] | None = None, rules_root: Path | None = None) -> list[Path]:
    """Write every built-in rule folder's base facts; the files written."""
    from .registry import load_rules

    data = json.loads(Path(source_file).read_text(encoding="utf-8"))
    facts = dict(data["facts"])
    overrides, nulls = dict(data.get("set", {})), list(data.get("null", []))
    problem = _options(list(args or []), overrides, nulls)
    if problem:
        raise ValueError(problem)
    for name in nulls:
        facts[name] = None
    by_folder: dict[Path, set[str]] = {}
    for rule in load_rules().rules.values():
        if rule.origin == "built-in":
            by_folder.setdefault(Path(rule.path).parent, set()).update(rule_fact_names(rule))
    source = " ".join(["python -m ddpdoctor.rules_engine.make_base_facts", _shown(source_file), *(args or [])])
    if data.get("run"):
        source += f"` from `{data['run']}"
    written = []
    for folder, names in sorted(by_folder.items()):
        out = (Path(rules_root) / folder.name) if rules_root else folder
        (out / BASE_FILE).write_text(base_text(facts, names, source, overrides), encoding="utf-8")
        written.append(out / BASE_FILE)
    return written


def _shown(path: Path) -> str:
    """The source file as a path from the checkout when it is inside it."""
    here = Path(__file__).resolve().parents[2]
    p = Path(path).resolve()
    return str(p.relative_to(here)) if p.is_relative_to(here) else Path(path).name


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        for path in write_all(Path(argv[0]), argv[1:]):
            print(f"wrote {path}")
    except (OSError, ValueError, KeyError) as exc:
        print(f"make_base_facts: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
