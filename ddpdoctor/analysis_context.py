"""What one analysis carries from start to end, built per analysis and handed down explicitly (nothing of it
lives in a module): the rule set in force, the thresholds of rules/metrics.toml with that rule set's overrides
applied, and the memory of the secret values the analysis met (hidden wherever they reappear in what it
writes).  Two analyses, in turn or in two threads, never see each other's."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from .redact import SecretMemory
from .resources import metric_params
from .rules_engine.registry import RuleSet, build_ruleset


@dataclass(frozen=True)
class AnalysisContext:
    ruleset: RuleSet  # the rules in force and their overrides (--rules, --set, config files)
    thresholds: dict  # rules/metrics.toml with ruleset.metrics applied: read, never modified
    secrets: SecretMemory = field(default_factory=SecretMemory)  # values seen under a secret name

    @classmethod
    def of(cls, ruleset: RuleSet | None = None) -> AnalysisContext:
        """A fresh context for ``ruleset`` (default: the rules ``ddpdoctor analyze`` uses without options)."""
        rs = ruleset if ruleset is not None else build_ruleset()
        return cls(ruleset=rs, thresholds=metric_params(rs.metrics))

    @classmethod
    def build(
        cls, rules: Iterable[str | os.PathLike] = (), sets: Iterable[str] = (), use_config: bool = True
    ) -> AnalysisContext:
        """The rules of ``--rules`` folders, ``--set`` items and (``use_config``) the nearest config file."""
        return cls.of(build_ruleset([os.fspath(r) for r in rules], list(sets), use_config=use_config))
