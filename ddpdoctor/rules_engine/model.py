"""Rule files: one TOML file per rule, loaded and checked into :class:`Rule` objects.

The format is documented in docs/RULES.md and described for editors by
rules/rule.schema.json.  Every problem in a rule file is reported as
``<file>:<line>: <what is wrong>`` (a :class:`RuleError`, which is an InputError: exit 2).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from ..errors import InputError
from ..expr import Expr, ExprError, compile_expr
from ..fact_catalogue import default_catalogue
from ..resources import metric_defaults
from ..template import Template, Variant, VariantTemplate, compile_template
from .fix_test_tables import KNOB_PATTERN as KNOB_PATTERN
from .fix_test_tables import PREDICT_MODELS as PREDICT_MODELS
from .fix_test_tables import Fix, RuleCase, knob, tune_keys

CATEGORIES = ("failure", "network", "dataloader", "communication", "compute", "imbalance", "config", "memory", "info")
VERDICT_CATEGORIES = ("dataloader", "communication", "compute", "imbalance")
SEVERITIES = ("critical", "high", "medium", "low", "info")
FIX_KINDS = ("code", "setting", "env", "command")
ID_PATTERN = re.compile(r"^[A-Z]{2,4}[0-9]{3}$")
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
# what a rule's [log] patterns give it (engine.py, selftest.py)
MATCH_NAMES = ("count", "ranks", "first_rank", "first_time", "first_line", "first_file")
TOP_KEYS = set(
    "id name category severity order title label why references when cost cost_is agreement confidence edge "
    "yields_to ranks summary params evidence log fix test".split()
)


class RuleError(InputError):
    """A rule file is malformed (names the file and line)."""


@dataclass
class Param:
    name: str
    default: object
    help: str = ""


@dataclass
class Rule:
    id: str
    name: str
    category: str
    severity: str
    title: str
    why: str
    references: list[str]
    params: dict[str, Param]
    evidence: dict[str, Expr]
    when: Expr
    summary: Template | VariantTemplate
    cost: Expr | None = None  # share of step time this finding costs (0..1)
    agreement: Expr | None = None  # share of ranks/steps that agree (0..1)
    confidence: Expr | None = None  # overrides the engine's confidence (0..1)
    # the per-(rank, step) measurement `when` compares with a threshold, and that threshold (rules_engine/edge.py)
    edge_value: Expr | None = None
    edge_threshold: Expr | None = None
    ranks: Expr | None = None
    fixes: list[Fix] = field(default_factory=list)
    tests: list[RuleCase] = field(default_factory=list)
    log_patterns: list[str] = field(default_factory=list)
    path: str = ""
    origin: str = "built-in"  # "built-in" or "user"
    label: str = ""  # how the verdict names this bottleneck (default: "<category>-bound")
    cost_is: str = "measured"  # "lower_bound": the cost is at least this (the speedup is "at least", not "up to")
    order: str = ""  # the finding's class in rules/metrics.toml [order] (default: see order_class)
    yields_to: tuple[str, ...] = ()  # rules whose finding says this one's mechanism (engine.drop_yielded)

    def param_values(self, overrides: dict | None = None) -> dict:
        vals = {k: p.default for k, p in self.params.items()}
        vals.update(overrides or {})
        return vals


# classes of rules/metrics.toml [order] that no rule declares: the engine gives them
DERIVED_CLASSES = ("verdict",)


def _message_patterns(c: _Ctx, ids) -> list[str]:
    """The patterns of catalogue entries (rules/messages/) a rule's [log] names by id."""
    from ..logs.catalogue import message_by_id  # (the catalogue loads rules' templates: imported when used)

    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        c.fail("messages", '[log] messages = ["catalogue.id", …]')
    out = []
    for mid in ids:
        msg = message_by_id(mid)
        if msg is None:
            c.fail("messages", f"no message {mid!r} in rules/messages/")
        out += [p.pattern for p in msg.patterns]
    return out


def order_class(rule_order: str, category: str, severity: str) -> str:
    """A finding's class in rules/metrics.toml [order]: the rule's own `order`, else "failure" for a
    finding that says the run failed (a failure rule, a critical network fault), else "cost"."""
    if rule_order:
        return rule_order
    if category == "failure" or (category == "network" and severity == "critical"):
        return "failure"
    return "cost"


def key_line(text: str, key: str, after: int = 0) -> int:
    """1-based line of the first ``key =`` (or ``[key]``) at or after line ``after``."""
    pat = re.compile(rf"^\s*(\"?{re.escape(key)}\"?\s*=|\[\[?{re.escape(key)}\]?\])")
    lines = text.splitlines()
    for i in range(after, len(lines)):
        if pat.match(lines[i]):
            return i + 1
    return 1


def metric_value(name: str, thresholds: dict | None = None):
    """The value of ``metrics.<section>.<key>`` in ``thresholds`` (an analysis's rules/metrics.toml after its
    overrides; default: as shipped), or KeyError."""
    node = thresholds or metric_defaults()
    for part in name.split(".")[1:]:
        node = node[part]
    if isinstance(node, dict):
        raise KeyError(name)
    return node


def unknown_name(name: str, allow: set[str], has_log: bool) -> str | None:
    """Why a name a rule reads is unknown (None when it is known): params and evidence are
    bare words; facts are in the catalogue (rules/facts.toml); ``match.*`` comes with [log];
    ``metrics.*`` are the thresholds of rules/metrics.toml."""
    if name in allow:
        return None
    if "." not in name:
        return f"unknown name {name!r} (not a param or an evidence name of this rule, nor a dotted fact name)"
    if name.startswith("match."):
        if has_log and name[6:] in MATCH_NAMES:
            return None
        return (
            f"unknown name {name!r} (match.{{{','.join(MATCH_NAMES)}}} come with a [log] table)"
            if not has_log
            else f"unknown name {name!r} (a [log] table gives match.{', match.'.join(MATCH_NAMES)})"
        )
    if name.startswith("metrics."):
        try:
            metric_value(name)
            return None
        except (KeyError, TypeError):
            return f"unknown threshold {name!r} (not in rules/metrics.toml)"
    if name in default_catalogue():
        return None
    return f"unknown fact {name!r} (not in the fact catalogue rules/facts.toml; see docs/FACTS.md)"


class _Ctx:
    def __init__(self, path: Path, text: str, has_log: bool = False):
        self.path, self.text, self.has_log = path, text, has_log

    def fail(self, key: str, message: str, after: int = 0, line: int | None = None) -> NoReturn:
        raise RuleError(f"{self.path}:{line or key_line(self.text, key, after)}: {message}")

    def _line_with(self, needle: str, after: int) -> int:
        """1-based line of the first line at or after ``after`` (0-based) holding ``needle``."""
        lines = self.text.splitlines()
        for i in range(after, len(lines)):
            if needle and needle in lines[i]:
                return i + 1
        return after + 1

    def expr(self, key: str, source, allow_names: set[str], after: int = 0) -> Expr:
        return self._compile(compile_expr, key, source, allow_names, after)

    def template(self, key: str, source, allow_names: set[str], after: int = 0) -> Template | VariantTemplate:
        """A string template, or parts with variants ([[key]] tables of text/when, or of variant = [...])."""
        if isinstance(source, str):
            return self._compile(compile_template, key, source, allow_names, after)
        if not isinstance(source, list) or not source or not all(isinstance(p, dict) for p in source):
            self.fail(key, f"{key}: a template is a string or [[{key}]] parts (text, when, variant)", after)
        heads = [
            n
            for n, line in enumerate(self.text.splitlines())
            if re.match(rf"^\s*\[\[(fix\.)?{re.escape(key)}\]\]", line) and n >= after
        ]
        parts = []
        for i, raw in enumerate(source):
            at = heads[i] if i < len(heads) else after
            variants = raw.get("variant") if "variant" in raw else [raw]
            extra = set(raw) - ({"variant"} if "variant" in raw else {"text", "when"})
            if extra or not isinstance(variants, list) or not variants:
                self.fail(
                    key, f"{key}: part #{i + 1} takes text and when, or variant = [{{when, text}}, …]", at, at + 1
                )
            part = []
            for v in variants:
                if not isinstance(v, dict) or not isinstance(v.get("text"), str) or set(v) - {"text", "when"}:
                    self.fail(key, f"{key}: part #{i + 1}: each variant needs text (and when)", at, at + 1)
                when = None
                if "when" in v:
                    line = self._line_with(str(v["when"]), at)
                    when = self._compile(compile_expr, "when", v["when"], allow_names, at, line, f"{key}: when")
                line = self._line_with(v["text"].split("\n", 1)[0], at)
                part.append(
                    Variant(
                        when, self._compile(compile_template, "text", v["text"], allow_names, at, line, f"{key}: text")
                    )
                )
            parts.append(part)
        return VariantTemplate(parts)

    def _compile(
        self, compiler, key: str, source, allow: set[str], after: int, line: int | None = None, label: str | None = None
    ):
        """Compile an expression or template; any problem names the file and the key's line
        (at or after line ``after``: the right [[fix]] table for a fix's keys; or ``line``)."""
        label = label or key
        try:
            out = compiler(source)
        except ExprError as exc:
            self.fail(key, f"{label}: {exc}", after, line)
        for n in sorted(out.names):
            problem = unknown_name(n, allow, self.has_log)
            if problem:
                self.fail(key, f"{label}: {problem}", after, line)
        return out


def load_rule_file(path: Path, origin: str = "built-in") -> Rule:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}: cannot read rule file ({exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        where = f"{path}:{m.group(1)}" if m else str(path)
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise RuleError(f"{where}: not valid TOML: {msg}") from None
    return parse_rule(data, path, text, origin)


def _log_patterns(c, log) -> list[str]:
    """A rule's [log] table: catalogue ids (rules/messages/, where the wording lives) and/or regexes."""
    log = log if isinstance(log, dict) else {}
    pats = log.get("patterns")
    if "messages" in log:
        pats = _message_patterns(c, log["messages"]) + list(pats or [])
    if not isinstance(pats, list) or not pats or not all(isinstance(p, str) for p in pats):
        c.fail("log", '[log] needs messages = ["catalogue.id", …] or patterns = ["regex", …]')
    for p in pats:
        try:
            re.compile(p)
        except re.error as exc:
            c.fail("patterns", f"log pattern {p!r} is not a valid regular expression ({exc})")
    return pats


def parse_rule(data: dict, path: Path, text: str, origin: str = "built-in") -> Rule:
    c = _Ctx(path, text, has_log="log" in data)
    for key in data:
        if key not in TOP_KEYS:
            c.fail(key, f"unknown key {key!r} (allowed: {', '.join(sorted(TOP_KEYS))})")
    for key in ("id", "name", "category", "severity", "title", "when", "summary"):
        if key == "summary" and isinstance(data.get(key), list) and data[key]:
            continue  # [[summary]] parts (variants)
        if not isinstance(data.get(key), str) or not data[key].strip():
            c.fail(key if key in data else "id", f"missing or empty required key {key!r}")
    rid = data["id"]
    if not ID_PATTERN.match(rid):
        c.fail("id", f"id {rid!r} must be 2-4 capital letters and 3 digits (its category's prefix and a number)")
    if not NAME_PATTERN.match(data["name"]):
        c.fail("name", f"name {data['name']!r} must be dotted lower case, e.g. dataloader.wait")
    if data["category"] not in CATEGORIES:
        c.fail("category", f"category {data['category']!r} is not one of {', '.join(CATEGORIES)}")
    if data["severity"] not in SEVERITIES:
        c.fail("severity", f"severity {data['severity']!r} is not one of {', '.join(SEVERITIES)}")
    classes = metric_defaults().get("order", {}).get("classes", [])
    if "order" in data and (data["order"] not in classes or data["order"] in DERIVED_CLASSES):
        c.fail(
            "order",
            f"order {data['order']!r} is not one of "
            f"{', '.join(x for x in classes if x not in DERIVED_CLASSES)} (rules/metrics.toml [order])",
        )

    params: dict[str, Param] = {}
    raw_params = data.get("params", {})
    if not isinstance(raw_params, dict):
        c.fail("params", "[params] must be a table")
    for name, spec in raw_params.items():
        if not re.match(r"^[a-z_][a-z0-9_]*$", name):
            c.fail(name, f"param name {name!r} must be a lower-case identifier")
        if isinstance(spec, dict):
            if "default" not in spec:
                c.fail(name, f"param {name!r} needs a default")
            params[name] = Param(name, spec["default"], str(spec.get("help", "")))
        else:
            params[name] = Param(name, spec)
    allow = set(params)

    evidence: dict[str, Expr] = {}
    raw_ev = data.get("evidence", {})
    if not isinstance(raw_ev, dict):
        c.fail("evidence", '[evidence] must be a table of name = "expression"')
    for name, src in raw_ev.items():
        if name in params:
            c.fail(name, f"evidence {name!r} has the name of a param")
        evidence[name] = c.expr(name, src, allow)
        allow.add(name)

    log_patterns = _log_patterns(c, data["log"]) if "log" in data else []

    def opt_expr(key):
        return c.expr(key, data[key], allow) if key in data else None

    edge = data.get("edge")
    if edge is not None and (not isinstance(edge, dict) or set(edge) != {"value", "threshold"}):
        c.fail("edge", 'edge is written edge = { value = "<per-step expression>", threshold = "<expression>" }')

    yields_to = data.get("yields_to", [])
    if not isinstance(yields_to, list) or not all(isinstance(r, str) and r != rid for r in yields_to):
        c.fail("yields_to", "yields_to is a list of other rules' ids")

    rule = Rule(
        id=rid,
        name=data["name"],
        category=data["category"],
        severity=data["severity"],
        title=data["title"].strip(),
        why=str(data.get("why", "")).strip(),
        references=list(data.get("references", [])),
        params=params,
        evidence=evidence,
        when=c.expr("when", data["when"], allow),
        summary=c.template("summary", data["summary"], allow),
        cost=opt_expr("cost"),
        agreement=opt_expr("agreement"),
        confidence=opt_expr("confidence"),
        edge_value=c.expr("edge", edge["value"], allow) if edge else None,
        edge_threshold=c.expr("edge", edge["threshold"], allow) if edge else None,
        ranks=opt_expr("ranks"),
        log_patterns=log_patterns,
        path=str(path),
        origin=origin,
        label=str(data.get("label", "")).strip(),
        order=str(data.get("order", "")),
        cost_is=str(data.get("cost_is", "measured")),
        yields_to=tuple(yields_to),
    )
    rule.fixes = _parse_fixes(c, data.get("fix", []), text, allow)
    rule.tests = _parse_tests(c, data.get("test", []), text, params)
    return rule


def _parse_fixes(c, fixes, text: str, allow: set[str]) -> list[Fix]:
    """A rule's [[fix]] tables (each checked; a problem names the line of its table)."""
    out: list[Fix] = []
    if not isinstance(fixes, list):
        c.fail("fix", "fixes are written as [[fix]] tables")
    fix_lines = [n for n, line in enumerate(text.splitlines()) if line.strip() == "[[fix]]"]
    for i, fx in enumerate(fixes):
        after = fix_lines[i] if i < len(fix_lines) else 0
        model, numerics = tune_keys(c, fx, after)
        for key in ("title", "change"):
            if not isinstance(fx.get(key), (str, list)):
                c.fail("fix", f"fix #{i + 1} needs a {key!r} string (or [[fix.{key}]] parts)", after)
        kind = fx.get("kind", "code")
        if kind not in FIX_KINDS:
            c.fail("kind", f"fix kind {kind!r} is not one of {', '.join(FIX_KINDS)}", after)
        out.append(
            Fix(
                title=c.template("title", fx["title"], allow, after),
                change=c.template("change", fx["change"], allow, after),
                kind=kind,
                applies_if=c.expr("applies_if", fx["applies_if"], allow, after) if "applies_if" in fx else None,
                knob=knob(c, fx, after),
                value=c.template("value", fx["value"], allow, after) if "value" in fx else None,
                leads_if=c.expr("leads_if", fx["leads_if"], allow, after) if "leads_if" in fx else None,
                trails_if=c.expr("trails_if", fx["trails_if"], allow, after) if "trails_if" in fx else None,
                predict=model,
                changes_numerics=numerics,
            )
        )
    return out


def _parse_tests(c, tests, text: str, params: dict[str, Param]) -> list[RuleCase]:
    """A rule's [[test]] tables: the cases `ddpdoctor rules test` runs."""
    out: list[RuleCase] = []
    test_lines = [n for n, line in enumerate(text.splitlines()) if line.strip() == "[[test]]"]
    for i, tc in enumerate(tests):
        if tc.get("expect") not in ("fire", "quiet", "abstain"):
            c.fail("test", f'test #{i + 1} needs expect = "fire", "quiet" or "abstain"')
        unset = tc.get("unset", [])
        if not isinstance(unset, list) or not all(isinstance(n, str) for n in unset):
            c.fail(
                "unset", f"test #{i + 1}: unset is a list of fact names", test_lines[i] if i < len(test_lines) else 0
            )
        for name in [*(tc.get("facts", {}) if isinstance(tc.get("facts"), dict) else ()), *unset]:
            problem = None if "." not in name else unknown_name(name, set(), False)
            if problem or "." not in name:
                c.fail(
                    name,
                    f"test #{i + 1} ({tc.get('name', 'unnamed')}): "
                    f"{problem or f'fact {name!r} is not a dotted fact name'}",
                    test_lines[i] if i < len(test_lines) else 0,
                )
        unknown_params = set(tc.get("params", {})) - set(params)
        if unknown_params:
            c.fail("test", f"test #{i + 1} sets unknown params {sorted(unknown_params)}")
        out.append(
            RuleCase(
                name=str(tc.get("name", f"case {i + 1}")),
                expect=tc["expect"],
                facts=dict(tc.get("facts", {})),
                params=dict(tc.get("params", {})),
                log=list(tc.get("log", [])),
                summary_contains=list(tc.get("summary_contains", [])),
                ranks=tc.get("ranks"),
                fixes_contain=list(tc.get("fixes_contain", [])),
                fixes_exclude=list(tc.get("fixes_exclude", [])),
                first_fix=tc.get("first_fix"),
                unset=list(unset),
            )
        )
    return out
