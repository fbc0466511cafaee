"""The set of rules in force for a run: built-in rules, the user's rule folders, and
threshold overrides from ``--set``, ``ddpdoctor.toml`` or ``[tool.ddpdoctor]`` in
``pyproject.toml``: rule params (``<rule id>.<param>``) and the thresholds of
rules/metrics.toml (``metrics.straggler.min_late_share``, kept in ``RuleSet.metrics``; an analysis
applies them in its own ``AnalysisContext.thresholds``).

Precedence (later wins): rule defaults < pyproject.toml < ddpdoctor.toml < ``--set``.
A user rule with the id of a built-in rule replaces it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..resources import metric_defaults, rules_dir
from .basefacts import BASE_FILE, load_base_facts
from .layout import LAYOUT_FILE, check_rule, load_layout
from .model import Rule, RuleError, load_rule_file

MESSAGES_DIR = "messages"  # rules/messages/*.toml: the message catalogue (logs/catalogue.py), not rules
# frameworks.toml: fix phrasing per framework; facts.toml: the fact catalogue; layout.toml: folder = category =
# id prefix (layout.py); base_facts.toml: a folder's base facts for its rules' [[test]] cases (basefacts.py)
NOT_RULES = {"metrics.toml", "frameworks.toml", "facts.toml", LAYOUT_FILE, BASE_FILE}


@dataclass
class RuleSet:
    rules: dict[str, Rule]
    params: dict[str, dict] = field(default_factory=dict)  # rule id -> param overrides
    disabled: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    config_files: list[str] = field(default_factory=list)
    metrics: dict[str, object] = field(default_factory=dict)  # "section.name" -> value (rules/metrics.toml)

    def active(self) -> list[Rule]:
        return [r for rid, r in sorted(self.rules.items()) if rid not in self.disabled]

    def get(self, rule_id: str) -> Rule:
        key = rule_id.upper()
        if key in self.rules:
            return self.rules[key]
        by_name = [r for r in self.rules.values() if r.name == rule_id]
        if by_name:
            return by_name[0]
        raise InputError(f"no rule {rule_id!r} (see `ddpdoctor rules list`)")


def _rule_files(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob("*.toml")
        if p.name not in NOT_RULES
        and not p.name.startswith(".")
        and MESSAGES_DIR not in p.relative_to(folder).parts[:-1]
    )


def _load_folder(folder: Path, origin: str) -> dict[str, Rule]:
    """The rules of a folder, each checked against the layout (the built-in folder's places; a user
    folder's prefixes) and its cases given their folder's base facts."""
    out: dict[str, Rule] = {}
    layout = load_layout(rules_dir())
    for f in _rule_files(folder):
        rule = load_rule_file(f, origin)
        check_rule(layout, rule, folder if origin == "built-in" else None)
        base = load_base_facts(f.parent)
        for case in rule.tests:
            case.base = base
        if rule.id in out:
            raise RuleError(f"{f}:1: rule id {rule.id} is also used by {out[rule.id].path}")
        out[rule.id] = rule
    return out


def load_rules(user_dirs: list[str] | None = None) -> RuleSet:
    from ..logs.catalogue import default_messages

    default_messages()  # the message catalogue is checked with the rules (exit 2 on a bad entry)
    rules = _load_folder(rules_dir(), "built-in")
    notes = []
    for d in user_dirs or []:
        folder = Path(d)
        if not folder.is_dir():
            raise InputError(f"--rules {d}: not a folder")
        user = _load_folder(folder, "user")
        if not user:
            raise InputError(f"--rules {d}: no rule files (*.toml) in this folder")
        for rid, rule in user.items():
            if rid in rules:
                notes.append(f"rule {rid} replaced by {rule.path}")
            rules[rid] = rule
    for rule in rules.values():
        unknown = [r for r in rule.yields_to if r not in rules]
        if unknown:
            raise RuleError(f"{rule.path}:1: yields_to names no rule: {', '.join(unknown)}")
    return RuleSet(rules=rules, notes=notes)


def _example_param(rs: RuleSet) -> str:
    """RULE.param of the first rule in force that has a param (error messages show a real one)."""
    return next((f"{r.id}.{p}" for r in rs.active() for p in r.params), "RULE.param")


def parse_value(text: str):
    """A --set value: a TOML literal (0.1, 4, true, "x"), else the text itself."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _apply_param(rs: RuleSet, key: str, value, source: str) -> None:
    rid, sep, pname = key.partition(".")
    if not sep or not pname:
        raise InputError(f"{source}: {key!r} must be RULE.param, e.g. {_example_param(rs)}")
    rule = rs.get(rid)
    if pname not in rule.params:
        raise InputError(
            f"{source}: rule {rule.id} has no param {pname!r} (it has: {', '.join(rule.params) or 'none'})"
        )
    default = rule.params[pname].default
    if (
        isinstance(default, (int, float))
        and not isinstance(default, bool)
        and (isinstance(value, bool) or not isinstance(value, (int, float)))
    ):
        raise InputError(f"{source}: {key} must be a number (default {default}), not {value!r}")
    rs.params.setdefault(rule.id, {})[pname] = value


def _same_kind(default, value) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def _apply_metric(rs: RuleSet, key: str, value, source: str) -> None:
    """``section.name`` (or ``section.sub.name``) of rules/metrics.toml."""
    node = metric_defaults()
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            here = ".".join(parts[:i]) or "rules/metrics.toml"
            have = ", ".join(sorted(node)) if isinstance(node, dict) else "none"
            raise InputError(f"{source}: no threshold metrics.{key} ({here} has: {have})")
        node = node[part]
    if isinstance(node, dict):
        raise InputError(f"{source}: metrics.{key} is a table; name one of its values ({', '.join(sorted(node))})")
    if not _same_kind(node, value):
        raise InputError(
            f"{source}: metrics.{key} must be a {type(node).__name__} like its default {node!r}, not {value!r}"
        )
    rs.metrics[key] = value


def _flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _apply_table(rs: RuleSet, table: dict, source: str) -> None:
    params = table.get("params", {})
    for key, value in params.items():
        if isinstance(value, dict):  # [tool.ddpdoctor.params.RULE] param = 0.1
            for pname, v in value.items():
                _apply_param(rs, f"{key}.{pname}", v, source)
        else:  # "RULE.param" = 0.1
            _apply_param(rs, key, value, source)
    metrics = table.get("metrics", {})
    if not isinstance(metrics, dict):
        raise InputError(f"{source}: metrics must be a table, e.g. [metrics.straggler] min_late_share = 0.1")
    for key, value in _flatten(metrics).items():  # [metrics.straggler] x = 1 or "straggler.x" = 1
        _apply_metric(rs, key, value, source)
    for rid in table.get("disable", []):
        rs.disabled.add(rs.get(rid).id)
    unknown = set(table) - {"params", "disable", "rules", "metrics"}
    if unknown:
        raise InputError(f"{source}: unknown keys {sorted(unknown)} (allowed: params, metrics, disable, rules)")


def find_config(start: Path | None = None) -> list[tuple[Path, dict]]:
    """ddpdoctor settings from the nearest pyproject.toml / ddpdoctor.toml (cwd, then parents)."""
    here = (start or Path.cwd()).resolve()
    found: list[tuple[Path, dict]] = []
    for folder in (here, *here.parents):
        for name in ("pyproject.toml", "ddpdoctor.toml"):
            f = folder / name
            if not f.is_file():
                continue
            try:
                data = tomllib.loads(f.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise InputError(f"{f}: cannot read ({exc})") from None
            table = data.get("tool", {}).get("ddpdoctor") if name == "pyproject.toml" else data
            if table:
                found.append((f, table))
        if found or (folder / ".git").exists():
            break
    return found


def build_ruleset(
    user_dirs: list[str] | None = None,
    sets: list[str] | None = None,
    config_start: Path | None = None,
    use_config: bool = True,
) -> RuleSet:
    config = find_config(config_start) if use_config else []
    dirs = list(user_dirs or [])
    for f, table in config:
        extra = table.get("rules")
        if extra:
            for d in [extra] if isinstance(extra, str) else extra:
                dirs.append(str((f.parent / d)))
    rs = load_rules(dirs)
    for f, table in config:
        _apply_table(rs, table, str(f))
        rs.config_files.append(str(f))
    for item in sets or []:
        key, eq, value = item.partition("=")
        if not eq:
            raise InputError(
                f"--set {item!r} must be RULE.param=value or metrics.section.name=value, e.g. {_example_param(rs)}=0.1"
            )
        key = key.strip()
        if key.startswith("metrics."):
            _apply_metric(rs, key[len("metrics.") :], parse_value(value.strip()), f"--set {item}")
        else:
            _apply_param(rs, key, parse_value(value.strip()), f"--set {item}")
    return rs
