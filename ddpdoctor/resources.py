"""Locate the data files shipped with ddpdoctor (the top-level ``rules/`` folder), and
serve the thresholds of ``rules/metrics.toml`` with the run's overrides applied
(``--set metrics.<section>.<name>=VALUE``, ``[metrics]`` in a config file)."""

from __future__ import annotations

import copy
import tomllib
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path


def rules_dir() -> Path:
    """``rules/`` of a source checkout or editable install, else the copy inside the wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_rules", here.parent / "rules"):
        if (candidate / "metrics.toml").is_file():
            return candidate
    raise FileNotFoundError(
        f"ddpdoctor's rules folder is missing (looked in {here / '_rules'} and {here.parent / 'rules'})"
    )


@lru_cache(maxsize=None)
def metric_defaults() -> dict:
    """rules/metrics.toml as shipped (no overrides)."""
    with open(rules_dir() / "metrics.toml", "rb") as fh:
        return tomllib.load(fh)


_active: dict = {"overrides": {}, "merged": None}


def metric_params() -> dict:
    """The thresholds in force: rules/metrics.toml with the overrides of :func:`set_metric_overrides`."""
    if not _active["overrides"]:
        return metric_defaults()
    if _active["merged"] is None:
        merged = copy.deepcopy(metric_defaults())
        for key, value in _active["overrides"].items():
            *path, leaf = key.split(".")
            node = merged
            for part in path:
                node = node[part]
            node[leaf] = value
        _active["merged"] = merged
    return _active["merged"]


def set_metric_overrides(overrides: dict[str, object] | None) -> None:
    """Replace the overrides in force ("section.name" -> value, checked by the rule registry)."""
    _active["overrides"] = dict(overrides or {})
    _active["merged"] = None


@contextmanager
def metric_overrides(overrides: dict[str, object] | None):
    """Apply overrides for the length of a ``with`` block (library callers: around run_analyze)."""
    before = _active["overrides"]
    set_metric_overrides(overrides)
    try:
        yield
    finally:
        set_metric_overrides(before)
