"""``analyze`` end to end: traces → breakdown, bundle settings and logs → facts → rules →
a :class:`Report` (the data object every renderer reads), under one :class:`AnalysisContext` per analysis.

Each input is optional on its own: a folder of traces from a ticket has no settings or
logs; a folder of logs pulled off a failed job has no traces.  Only a folder with
neither is an error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from . import sources
from .analysis import Analysis, AnalyzeOptions, analyze
from .bundle.inputs import Inputs
from .bundle.settings import load_bundle_facts
from .errors import InputError, NoTracesError
from .logs import LogAnalysis, analyze_logs
from .redact import SecretMemory
from .resources import metric_params
from .rules_engine.facts import merge_facts, trace_facts
from .rules_engine.registry import RuleSet, build_ruleset
from .rules_engine.verdict import Diagnosis, diagnose


@dataclass(frozen=True)
class AnalysisContext:
    """What one analysis carries from start to end, built per analysis and handed down explicitly (nothing of
    it lives in a module): the rule set in force, the thresholds of rules/metrics.toml with that rule set's
    overrides applied, and the memory of the secret values the analysis met (hidden wherever they reappear in
    what it writes).  Two analyses, in turn or in two threads, never see each other's."""

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


@dataclass
class Report:
    inputs: list[str]
    analysis: Analysis | None
    diagnosis: Diagnosis
    facts: dict
    logs: LogAnalysis | None = None  # when log files were found
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def partial(self) -> bool:
        return bool(
            self.analysis is None or self.analysis.partial or self.facts.get("run.status") in ("partial", "failed")
        )


def _bundle_facts(paths: list[str], warnings: list[str], inputs: Inputs, context: AnalysisContext) -> dict:
    try:
        return load_bundle_facts(paths, inputs, context.thresholds) or {}
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - settings are a bonus; a bad file must not stop the analysis
        warnings.append(f"bundle settings not read: {type(exc).__name__}: {exc}")
        return {}


def _logs(paths: list[str], known: dict, warnings: list[str], inputs: Inputs, context: AnalysisContext):
    try:
        return analyze_logs(
            paths, known_facts=known, inputs=inputs, thresholds=context.thresholds, secrets=context.secrets
        )
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a log we cannot parse must not hide the trace analysis
        warnings.append(f"logs not analyzed: {type(exc).__name__}: {exc}")
        return None


def run_analyze(
    paths: list[str], opts: AnalyzeOptions | None = None, context: AnalysisContext | None = None, progress=None
) -> Report:
    """One analysis; ``context`` (default: a fresh one with the default rules) is its own: the rules, the
    thresholds and the secrets memory it reads and fills are handed down from here, never kept in a module."""
    t0 = time.perf_counter()
    ctx = context if context is not None else AnalysisContext.of()
    t = ctx.thresholds
    warnings: list[str] = []
    analysis = None
    no_traces: NoTracesError | None = None
    inputs = Inputs(list(paths))  # one walk of each folder, shared by traces, bundle records and logs
    try:
        analysis = analyze(paths, opts, progress=progress, inputs=inputs, thresholds=t)
    except NoTracesError as exc:
        no_traces = exc
    local = [p for p in paths if not sources.is_url(p)]  # URL inputs: traces only (sources.py)
    if len(local) < len(paths):
        warnings.append(
            "logs and bundle records are read from local paths only, not from "
            + ", ".join(p for p in paths if sources.is_url(p))
        )
    bundle = _bundle_facts(local, warnings, inputs, ctx)
    tfacts = trace_facts(analysis, t) if analysis is not None else {"trace.present": False}
    logs = _logs(local, merge_facts(tfacts, bundle, thresholds=t), warnings, inputs, ctx)
    if analysis is None and logs is None:
        raise InputError(
            f"{no_traces}; no log files either (*.log, *.txt, *.out, *.err, NCCL debug files): nothing to analyze"
        )
    if analysis is None:
        warnings.append(f"{no_traces}; performance not assessed, logs only")
    # a log file or record that could not be read (a FIFO, a record nested too deeply) is said, not dropped
    warnings.extend(w for w in getattr(logs, "warnings", None) or [] if w.startswith("skipped "))
    if analysis is not None:  # every analyze path (analyze, bundle, compare) honours --hta
        from .metrics import hta_adapter

        analysis.hta = hta_adapter.cross_check(analysis, mode=(opts or AnalyzeOptions()).hta)
    facts = merge_facts(tfacts, bundle, getattr(logs, "facts", None), thresholds=t)
    if bundle.get("capture.agent_errors"):
        warnings.append(
            "the capture agent hit errors it went on after ("
            + "; ".join(bundle.get("capture.agent_error_places") or [])[:300]
            + "): settings or events of those ranks may be incomplete (settings.json agent_errors)"
        )
    diag = diagnose(facts, ctx.ruleset, log_search=getattr(logs, "search", None), thresholds=t)
    return Report(
        inputs=list(paths),
        analysis=analysis,
        diagnosis=diag,
        facts=facts,
        logs=logs,
        warnings=warnings + (analysis.warnings if analysis else []),
        seconds=time.perf_counter() - t0,
    )
