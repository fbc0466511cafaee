"""Write rules/<folder>/base_facts.toml from a real run's diagnosis JSON (see basefacts.py):

    python -m ddpdoctor.rules_engine.make_base_facts DIAGNOSIS.json [--set name=TOML-value …] [--null name …]

Each folder gets the facts its rules read, as the run recorded them; ``--set`` and ``--null`` put other values
in (written into the file's header, so the file says how it differs from the run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tomllib

from .basefacts import BASE_FILE, base_text, rule_fact_names


def main(argv: list[str]) -> int:
    from .registry import load_rules

    if not argv or argv[0].startswith("-"):
        print("usage: python -m ddpdoctor.rules_engine.make_base_facts DIAGNOSIS.json [--set name=VALUE …] "
              "[--null name …]", file=sys.stderr)
        return 2
    facts = json.loads(Path(argv[0]).read_text(encoding="utf-8"))["facts"]
    overrides = {}
    rest = argv[1:]
    while rest:
        flag, item, *rest = rest + [""] if len(rest) == 1 else rest
        name, eq, value = item.partition("=")
        if flag == "--null" and item:
            facts[item] = None
        elif flag == "--set" and eq:
            overrides[name] = tomllib.loads(f"v = {value}")["v"]
        else:
            print(f"not --set name=VALUE or --null name: {flag} {item}", file=sys.stderr)
            return 2
    by_folder: dict[Path, set[str]] = {}
    for rule in load_rules().rules.values():
        if rule.origin == "built-in":
            by_folder.setdefault(Path(rule.path).parent, set()).update(rule_fact_names(rule))
    source = "python -m ddpdoctor.rules_engine.make_base_facts " + " ".join([Path(argv[0]).name, *argv[1:]])
    for folder, names in sorted(by_folder.items()):
        (folder / BASE_FILE).write_text(base_text(facts, names, source, overrides), encoding="utf-8")
        print(f"wrote {folder / BASE_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
