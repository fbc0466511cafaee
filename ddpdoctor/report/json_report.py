"""The diagnosis as JSON (``"schema": "ddpdoctor.diagnosis/1"``): verdict, findings with
fixes, the facts the rules read, and the per-(rank, step) analysis under ``analysis``.
It is the stable interface that reports, ``compare`` and other tools read."""

from __future__ import annotations

import math
from dataclasses import asdict, is_dataclass

from ..analysis import Analysis
from ..metrics.columns import COLUMNS, PARTITION_CPU, PARTITION_GPU
from ..version import __version__

SCHEMA = "ddpdoctor.diagnosis/1"
ANALYSIS_SCHEMA = "ddpdoctor.analysis/1"
MAX_LOG_EVENTS = 2000


def _clean(x):
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else round(x, 6)
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def analysis_dict(a: Analysis) -> dict:
    table = []
    ranks = {}
    for s in a.summaries:
        for i, w in enumerate(s.steps):
            vals = {c: s.values[c][i] for c in COLUMNS}
            st = vals["step_time"]
            share = {c: (None if v is None or not st else v / st) for c, v in vals.items()}
            table.append(
                {
                    "rank": s.rank,
                    "step": w.name,
                    "step_number": w.number,
                    "start_us": w.start,
                    "end_us": w.end,
                    "us": vals,
                    "share": share,
                }
            )
        n = len(s.steps)
        ranks[str(s.rank)] = {
            "files": s.paths,
            "device_kind": s.device_kind,
            "backend": s.backend,
            "devices": sorted(set(s.devices)),
            "host": s.host,
            "host_source": (a.hosts.source.get(s.rank) if a.hosts else None) or ("trace" if s.host else None),
            "schema": s.schema,
            "step_source": s.step_source,
            "comm_source": s.comm_source,
            "steps": n,
            "events": s.n_events,
            "collectives": len(s.collectives),
            "mean_us": {
                c: (None if s.values[c][0] is None or not n else sum(v for v in s.values[c] if v is not None) / n)
                for c in COLUMNS
            },
            "share": a.rank_share(s),
            "notes": s.notes,
            "timeline": getattr(s, "timeline", None),
            "decoder": s.decoder or None,
        }
    cross = asdict(a.cross)
    return _clean(
        {
            "schema": ANALYSIS_SCHEMA,
            "inputs": a.inputs,
            "world_size": a.discovery.world_size,
            "ranks_present": [s.rank for s in a.summaries],
            "partial": a.partial,
            "warnings": a.warnings,
            "columns": COLUMNS,
            "partition": {"gpu": list(PARTITION_GPU), "cpu": list(PARTITION_CPU)},
            "table": table,
            "ranks": ranks,
            "cross_rank": cross,
            "hosts": a.hosts.as_dict() if a.hosts else None,
            "hta": a.hta,
            "timing": {"seconds": a.seconds, "bytes_read": a.bytes_read},
        }
    )


def _plain_facts(facts: dict) -> dict:
    """The facts rules read, without per-step vectors; per-rank vectors as {rank: value}."""
    from ..expr import Vec
    from ..rules_engine.engine import plain

    out = {}
    for k, v in sorted(facts.items()):
        if k.startswith("step."):
            continue
        if isinstance(v, Vec) and v.values.dtype == object:
            continue
        out[k] = plain(v)
    return out


def _finding_dict(f) -> dict:
    d = asdict(f)
    d["fixes"] = [asdict(x) for x in f.fixes]
    return d


def _logs_dict(logs) -> dict | None:
    if logs is None:
        return None
    events = []
    for e in list(getattr(logs, "events", []))[:MAX_LOG_EVENTS]:
        events.append(asdict(e) if is_dataclass(e) and not isinstance(e, type) else dict(e))
    return {
        "files": [str(f) for f in getattr(logs, "files", [])],
        "ranks": list(getattr(logs, "ranks", [])),
        "events": events,
        "events_truncated": len(getattr(logs, "events", [])) > MAX_LOG_EVENTS,
    }


def to_dict(report, thresholds: dict | None = None) -> dict:
    """The document of ``report``; ``thresholds``: its analysis's (AnalysisContext.thresholds), which decide
    which fixes are worth a trial (default: rules/metrics.toml as shipped)."""
    from ..trial.predict import annotate

    d = report.diagnosis
    return annotate(
        _clean(
            {
                "schema": SCHEMA,
                "ddpdoctor_version": __version__,
                "inputs": report.inputs,
                "partial": report.partial,
                "warnings": report.warnings,
                "verdict": asdict(d.verdict),
                "costs": [asdict(c) for c in getattr(d, "costs", [])],
                "findings": [_finding_dict(f) for f in d.findings],
                "abstained": d.abstained,
                "not_assessed": d.not_assessed,
                "rule_errors": d.errors,
                "rules_evaluated": d.rules_evaluated,
                "rule_notes": d.notes,
                "facts": _plain_facts(report.facts),
                "analysis": analysis_dict(report.analysis) if report.analysis is not None else None,
                "logs": _logs_dict(report.logs),
                "timing": {"seconds": report.seconds},
            }
        ),
        thresholds,
    )
