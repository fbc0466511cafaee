"""The diagnosis document (``ddpdoctor.diagnosis/1``) as typed structs.

``json_report.to_dict`` builds the document; :func:`validate` checks one (built here or read
back from a report.json someone attached to a ticket) against these types, so a renderer
never meets a wrong type; :func:`json_schema` exports the JSON Schema (docs/diagnosis.schema.json,
kept current by a test).  The typed part is what the renderers read to decide: verdict,
costs, findings and fixes, log events; ``facts`` and ``analysis`` stay open mappings (their
keys are the fact catalogue, rules/facts.toml, and the analysis schema
``ddpdoctor.analysis/1``).  msgspec does the checking: one pass in C, with the path of the
first wrong field in its message (``Expected `str`, got `int` - at `$.findings[0].title```).
"""

from __future__ import annotations

from typing import Any, Optional

import msgspec

from ..errors import InputError

SCHEMA = "ddpdoctor.diagnosis/1"


class Verdict(msgspec.Struct, forbid_unknown_fields=False):
    bottleneck: Optional[str]  # dataloader | communication | compute | imbalance | None
    confidence: Optional[float]
    confidence_label: Optional[str]  # high | medium | low
    expected_speedup: Optional[float]
    summary: str
    rule: Optional[str] = None
    failed: bool = False
    label: Optional[str] = None
    confidence_hints: list[str] = []
    speedup_is_lower_bound: bool = False  # expected_speedup is "at least", not "up to"


class Cost(msgspec.Struct):
    rule: str
    category: str
    label: str
    cost: float
    material: bool
    eligible: bool = True
    why_not: Optional[str] = None
    at_line: bool = False  # within the step-to-step noise of its rule's threshold: decides no verdict


class Fix(msgspec.Struct):
    title: str
    change: str
    kind: str = "code"
    not_recorded: list[str] = []
    knob: Optional[str] = None
    value: Optional[str] = None
    framework: Optional[str] = None
    predicted_speedup: Optional[float] = None  # what `run --try` is predicted to gain (trial/predict.annotate)
    prediction_note: Optional[str] = None  # how that prediction was made
    worth_a_trial: Optional[bool] = None  # the prediction is above the analysis's [trial] min_predicted_speedup


class Edge(msgspec.Struct):
    """How far a finding is from the threshold that made it fire (rules_engine/edge.py)."""

    threshold: float
    value: float
    noise: float
    distance: Optional[float] = None  # None: the steps agree exactly (infinitely far)
    at_line: bool = False


class Finding(msgspec.Struct):
    rule: str
    category: str
    title: str
    summary: str
    name: str = ""
    severity: str = ""
    ranks: list[int] = []
    evidence: dict[str, Any] = {}
    fixes: list[Fix] = []
    why: str = ""
    references: list[str] = []
    cost: Optional[float] = None
    expected_speedup: Optional[float] = None
    speedup_is_lower_bound: bool = False
    agreement: Optional[float] = None
    confidence: Optional[float] = None
    not_recorded: list[str] = []
    label: Optional[str] = None
    edge: Optional[Edge] = None


class Abstained(msgspec.Struct):
    rule: str
    category: str
    missing: list[str] = []


class LogEvent(msgspec.Struct):
    kind: str
    text: str
    rank: Optional[int] = None
    time: Optional[float] = None
    file: str = ""
    line_no: Optional[int] = None
    data: dict[str, Any] = {}


class Logs(msgspec.Struct):
    files: list[str] = []
    ranks: list[int] = []
    events: list[LogEvent] = []
    events_truncated: bool = False


class Trial(msgspec.Struct):
    line: str
    change: Optional[dict[str, Any]] = None
    measured_speedup: Optional[float] = None  # ratio of mean step times (the job's time per step)
    ci95: Optional[list[Optional[float]]] = None
    median_speedup: Optional[float] = None  # ratio of median step times (the typical step)
    predicted_speedup: Optional[float] = None
    predicted_by: Optional[str] = None
    trial_json: Optional[str] = None


class Diagnosis(msgspec.Struct):
    schema: str
    verdict: Verdict
    ddpdoctor_version: str = ""
    inputs: list[str] = []
    partial: bool = False
    warnings: list[str] = []
    costs: list[Cost] = []
    findings: list[Finding] = []
    abstained: list[Abstained] = []
    not_assessed: list[str] = []
    rule_errors: list[str] = []
    rules_evaluated: int = 0
    rule_notes: list[str] = []
    facts: dict[str, Any] = {}
    analysis: Optional[dict[str, Any]] = None
    logs: Optional[Logs] = None
    timing: dict[str, Any] = {}
    trial: Optional[Trial] = None
    redaction: Optional[dict[str, Any]] = None


def validate(d: dict, where: str = "diagnosis") -> dict:
    """``d`` if it is a well-typed diagnosis document, else one-line InputError naming the field."""
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise InputError(f'{where}: not a ddpdoctor diagnosis (expected "schema": "{SCHEMA}")')
    try:
        msgspec.convert(d, Diagnosis, strict=False)
    except msgspec.ValidationError as exc:
        raise InputError(f"{where}: malformed ddpdoctor diagnosis ({str(exc)[:160]})") from None
    return d


def json_schema() -> dict:
    """The JSON Schema of the document (draft 2020-12), as written to docs/diagnosis.schema.json."""
    out = msgspec.json.schema(Diagnosis)
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    out["title"] = SCHEMA
    return out
