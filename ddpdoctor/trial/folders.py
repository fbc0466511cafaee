"""A `run --try` folder read back by `analyze` and `compare`: which bundles are its arms."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click

from ..errors import InputError


def trial_sides(folder: str) -> tuple[str, str, dict]:
    p = Path(folder) / "trial.json"
    if not p.is_file():
        raise InputError(f"{folder}: compare needs BEFORE and AFTER, or one `run --try` folder (with trial.json)")
    try:
        t = json.loads(p.read_text(encoding="utf-8"))
        arms = t["arms"]
        base = next(a["bundle"] for a in arms if a["arm"] == "baseline")
        tried = next(a["bundle"] for a in arms if a["arm"] == "try")
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        raise InputError(f"{p}: not a complete trial (needs a baseline and a try arm)") from None
    return base, tried, t


def trial_arm(paths: list[str], quiet: bool) -> tuple[list[str], dict | None]:
    """A `run --try` folder holds one bundle per arm and run: say what the trial measured and analyze its
    first baseline bundle (the arms are different runs; mixing their traces would be wrong)."""
    if len(paths) != 1 or not (Path(paths[0]) / "trial.json").is_file():
        return paths, None
    from .runner import summary_line

    try:
        t = json.loads((Path(paths[0]) / "trial.json").read_text(encoding="utf-8"))
        arms = t.get("arms") or []
    except (OSError, ValueError, AttributeError):
        raise InputError(f"{paths[0]}: trial.json is not readable JSON") from None
    base = next((a.get("bundle") for a in arms if a.get("arm") == "baseline"), None)
    if not base or not Path(base).is_dir():
        raise InputError(f"{paths[0]}: a trial folder without its baseline bundle; analyze one arm's folder")
    if not quiet:
        click.echo(f"ddpdoctor: trial {paths[0]}: {summary_line(t)}", err=True)
        others = ", ".join(Path(a["bundle"]).name for a in arms if a.get("bundle") != base)
        click.echo(
            f"ddpdoctor: analyzing the baseline arm {base} (the others, analyzed one at a time: {others})", err=True
        )
    return [base], {
        "line": summary_line(t),
        "change": t.get("change"),
        "measured_speedup": t.get("measured_speedup"),
        "ci95": t.get("ci95"),
        "median_speedup": t.get("median_speedup"),
        "predicted_speedup": t.get("predicted_speedup"),
        "predicted_by": t.get("predicted_by"),
        "trial_json": str(Path(paths[0]) / "trial.json"),
    }


def prepare_output_folder(target: Path, force: bool, marker: str, kind: str) -> None:
    """A new or empty folder for `run --try` (``marker`` trial.json) or `tune` (tune.json); with --force
    also an earlier folder of the same kind (it holds ``marker``), never anything else."""
    if target.exists():
        if not target.is_dir():
            raise InputError(f"{target}: exists and is not a folder")
        if any(target.iterdir()):
            if not force:
                raise InputError(
                    f"{target}: output folder already exists (use --force to replace it, or another --out)"
                )
            if not (target / marker).is_file():
                raise InputError(
                    f"{target}: exists and is not a ddpdoctor {kind} (no {marker}); refusing to delete it even with --force"
                )
            shutil.rmtree(target)
    target.mkdir(parents=True, exist_ok=True)
