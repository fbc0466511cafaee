"""The rule engine: declarative rules (rules/*.toml) evaluated safely over a run's facts."""

from .engine import Finding, FixOut, Outcome, evaluate
from .registry import RuleSet, build_ruleset, load_rules
from .verdict import Diagnosis, Verdict, diagnose

__all__ = [
    "Diagnosis",
    "Finding",
    "FixOut",
    "Outcome",
    "RuleSet",
    "Verdict",
    "build_ruleset",
    "diagnose",
    "evaluate",
    "load_rules",
]
