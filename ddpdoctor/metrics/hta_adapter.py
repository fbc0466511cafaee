"""The one module that imports HTA (HolisticTraceAnalysis, on PyPI as ``traceinsight``).

HTA cross-checks our GPU numbers with its temporal breakdown, idle-time breakdown
(host wait vs kernel wait) and comm/compute overlap.  HTA crashes or returns NaN on
CPU/gloo traces, prints to stdout and loads slowly (≈ 15 MB/s), so it only runs on GPU
traces, quietly, and any failure becomes a note instead of an error.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import tempfile
import warnings
from pathlib import Path

AUTO_MAX_BYTES = 64 * 1024 * 1024
INSTALL_HINT = "pip install 'ddpdoctor[hta]'"


def available() -> bool:
    """HTA is the optional extra ``ddpdoctor[hta]`` (traceinsight): is it installed?"""
    import importlib.util

    try:
        return importlib.util.find_spec("hta") is not None
    except (ImportError, ValueError):
        return False


def require(mode: str) -> None:
    """``--hta on`` without HTA installed: one line saying how to install it (exit 2)."""
    if mode == "on" and not available():
        from ..errors import InputError

        raise InputError(f"--hta on needs HTA, an optional extra: {INSTALL_HINT}")


def cross_check(analysis, mode: str = "auto") -> dict | None:
    """HTA's view of the same traces, or ``None`` when it does not apply.

    Returns ``{"ranks": {rank: {metric: share}}}`` or ``{"error": reason}``; never raises.
    """
    if mode == "off" or (mode == "auto" and not available()):
        return None
    gpu = [s for s in analysis.summaries if s.device_kind == "gpu"]
    if not gpu:
        return None if mode == "auto" else {"error": "HTA needs GPU traces (it fails on CPU-only/gloo traces)"}
    if mode == "auto" and analysis.bytes_read > AUTO_MAX_BYTES:
        return None
    if any(isinstance(s.paths[-1], str) and "://" in s.paths[-1] for s in gpu):
        return None if mode == "auto" else {"error": "HTA reads local files only, not URL inputs"}
    if len(gpu) > 1 and any(analysis.discovery.by_rank[s.rank][-1].rank_source != "distributedInfo" for s in gpu):
        return {"error": "HTA reads ranks only from distributedInfo, which some traces lack"}
    try:
        return {"ranks": _run(gpu)}
    except Exception as exc:  # noqa: BLE001 - HTA must never break the tool
        return {"error": f"HTA failed: {type(exc).__name__}: {str(exc)[:200]}"}


def _run(summaries) -> dict:
    with tempfile.TemporaryDirectory(prefix="ddpdoctor-hta-") as tmp:
        for s in summaries:
            src = Path(s.paths[-1]).resolve()
            suffix = ".json.gz" if src.name.endswith(".gz") else ".json"
            os.symlink(src, Path(tmp) / f"rank{s.rank}{suffix}")
        sink = io.StringIO()
        logging.disable(logging.CRITICAL)
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from hta.trace_analysis import TraceAnalysis

                ta = TraceAnalysis(trace_dir=tmp)
                temporal = _guard(lambda: ta.get_temporal_breakdown(visualize=False))
                overlap = _guard(lambda: ta.get_comm_comp_overlap(visualize=False))
                ranks = sorted(s.rank for s in summaries)
                idle = _guard(
                    lambda: ta.get_idle_time_breakdown(ranks=ranks, visualize=False, show_idle_interval_stats=False)
                )
        finally:
            logging.disable(logging.NOTSET)
    out: dict[int, dict] = {}
    if temporal is not None:
        for _, row in temporal.iterrows():
            r = out.setdefault(int(row["rank"]), {})
            r["compute_share"] = _share(row.get("compute_time_pctg"))
            r["non_compute_share"] = _share(row.get("non_compute_time_pctg"))
            r["idle_share"] = _share(row.get("idle_time_pctg"))
    if overlap is not None:
        for _, row in overlap.iterrows():
            out.setdefault(int(row["rank"]), {})["comm_comp_overlap"] = _share(row.get("comp_comm_overlap_pctg"))
    if idle is not None:
        frame = idle[0] if isinstance(idle, tuple) else idle
        for rank, group in frame.groupby("rank"):
            total = float(group["idle_time"].sum())
            r = out.setdefault(int(rank), {})
            for cat, g in group.groupby("idle_category"):
                r[f"idle_{cat}"] = float(g["idle_time"].sum()) / total if total > 0 else None
    return out


def _guard(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - one HTA metric failing leaves the others
        return None


def _share(pct) -> float | None:
    try:
        v = float(pct)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v / 100.0
