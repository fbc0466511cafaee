"""Locate the data files shipped with ddpdoctor (the top-level ``rules/`` folder), and
serve the thresholds of ``rules/metrics.toml`` with one analysis's overrides applied
(``--set metrics.<section>.<name>=VALUE``, ``[metrics]`` in a config file): the analysis holds
them (``AnalysisContext.thresholds``), nothing here does."""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Mapping
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


def metric_params(overrides: Mapping[str, object] | None = None) -> dict:
    """The thresholds of one analysis: rules/metrics.toml with ``overrides`` ("section.name" -> value, checked
    by the rule registry) applied to a copy.  Pure: nothing is remembered between calls; callers read the
    result and never modify it (without overrides it is the shared, cached :func:`metric_defaults`)."""
    if not overrides:
        return metric_defaults()
    merged = copy.deepcopy(metric_defaults())
    for key, value in overrides.items():
        *path, leaf = key.split(".")
        node = merged
        for part in path:
            node = node[part]
        node[leaf] = value
    return merged
