"""Locate the data files shipped with ddpdoctor (the top-level ``rules/`` folder)."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path


def rules_dir() -> Path:
    """``rules/`` of a source checkout or editable install, else the copy inside the wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_rules", here.parent / "rules"):
        if (candidate / "metrics.toml").is_file():
            return candidate
    raise FileNotFoundError(f"ddpdoctor's rules folder is missing (looked in {here / '_rules'} and {here.parent / 'rules'})")


@lru_cache(maxsize=None)
def metric_params() -> dict:
    with open(rules_dir() / "metrics.toml", "rb") as fh:
        return tomllib.load(fh)
