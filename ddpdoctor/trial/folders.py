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
        raise InputError(
            f"{folder}: compare needs BEFORE and AFTER, or one `run --try` folder (trial.json) or `tune` folder (tune.json)"
        )
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


def _arm_bundle(folder: Path, bundle) -> Path | None:
    """An arm's bundle as trial.json names it, or beside trial.json when the folder was moved."""
    if not bundle:
        return None
    p = Path(bundle)
    if p.is_dir():
        return p
    moved = folder / p.name
    return moved if moved.is_dir() else None


def _trial_arm_bundle(folder: Path, arm: str) -> Path:
    """The first bundle of one arm ("baseline" or "try") of a `run --try` folder."""
    try:
        arms = json.loads((folder / "trial.json").read_text(encoding="utf-8"))["arms"]
        bundle = next(a.get("bundle") for a in arms if a.get("arm") == arm)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, StopIteration):
        raise InputError(f"{folder / 'trial.json'}: not a complete trial (needs a baseline and a try arm)") from None
    found = _arm_bundle(folder, bundle)
    if found is None:
        raise InputError(f"{folder}: the trial's {arm} bundle {bundle} is missing")
    return found


def _tune_bundles(folder: Path) -> tuple[Path, Path, str]:
    """(the original job's bundle, the final settings' bundle, what the final is) of a `tune` folder."""
    try:
        doc = json.loads((folder / "tune.json").read_text(encoding="utf-8"))
        trials = list(doc.get("trials") or [])
        settings = dict(doc.get("settings") or {})
    except (OSError, ValueError, TypeError, AttributeError):
        raise InputError(f"{folder / 'tune.json'}: not readable JSON") from None
    original = folder / "baseline-0"
    if not original.is_dir():
        raise InputError(f"{folder}: the tune's original bundle (baseline-0) is missing")
    kept = [t for t in trials if isinstance(t, dict) and t.get("kept")]
    if not kept:
        return original, original, "the original job's run (tune kept no change)"
    last = kept[-1]
    trial_folder = _arm_bundle(folder, last.get("folder")) or folder / f"trial-{last.get('trial')}"
    shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "the kept settings"
    return original, _trial_arm_bundle(trial_folder, "try"), f"the run with the final settings ({shown})"


def folder_kind(path: str) -> str | None:
    """'trial' for a `run --try` folder, 'tune' for a `tune` folder, else None."""
    p = Path(path)
    if (p / "trial.json").is_file():
        return "trial"
    if (p / "tune.json").is_file():
        return "tune"
    return None


def compare_side(path: str, side: str) -> tuple[str, str | None]:
    """One side of `compare BEFORE AFTER`: a `run --try` folder stands for its baseline arm as BEFORE and its
    try arm as AFTER; a `tune` folder for the original job as BEFORE and the final settings as AFTER (their
    first run each). Anything else is itself. Returns the path and a sentence saying which run was taken."""
    kind = folder_kind(path)
    if kind == "trial":
        arm = "baseline" if side == "BEFORE" else "try"
        bundle = _trial_arm_bundle(Path(path), arm)
        return str(bundle), f"{side} {path}: the trial's {arm} arm ({bundle.name})"
    if kind == "tune":
        original, final, what = _tune_bundles(Path(path))
        bundle = original if side == "BEFORE" else final
        said = "the original job's run" if side == "BEFORE" else what
        return str(bundle), f"{side} {path}: {said} ({bundle.relative_to(path)})"
    return path, None


def tune_sides(path: str) -> tuple[str, str, str]:
    """`compare TUNE`: the original job against the final settings, and a sentence saying so."""
    original, final, what = _tune_bundles(Path(path))
    if original == final:
        raise InputError(f"{path}: tune kept no change, so its final run is the original job's: nothing to compare")
    return str(original), str(final), f"tune {path}: the original job's run against {what}"


def compare_sides(before: str, after: str | None) -> tuple[str, str, dict | None, list[str]]:
    """`compare`'s two sides as runs to analyze: a lone `tune` folder (original against final) or `run --try`
    folder (its first baseline and try bundles, and the trial), else each side as :func:`compare_side` reads
    it. Returns BEFORE, AFTER, the trial (or None) and the sentences that say which runs were taken."""
    if after is None and folder_kind(before) == "tune":
        before, after, note = tune_sides(before)
        return before, after, None, [note]
    if after is None:
        before, after, trial = trial_sides(before)
        return before, after, trial, []
    (before, note_b), (after, note_a) = compare_side(before, "BEFORE"), compare_side(after, "AFTER")
    return before, after, None, [n for n in (note_b, note_a) if n]


TRIAL_KEYS = (
    "change",
    "measured_speedup",
    "ci95",
    "median_speedup",
    "predicted_speedup",
    "predicted_by",
    "baseline_verdict",
    "try_verdict",
)


def trial_header(trial: dict) -> tuple[dict, str]:
    """What a comparison of a trial's arms carries of the trial, and the line said above it."""
    from .runner import summary_line

    change = ", ".join(f"{k}={v}" for k, v in (trial.get("change") or {}).items())
    return {k: trial.get(k) for k in TRIAL_KEYS}, (
        f"Trial of {change}: {summary_line(trial)}\n(over all runs of both arms; below: the first run of each)\n\n"
    )
