"""What counts as launching a job, for the ``live`` marker's guard (conftest.py): torchrun (or
``torch.distributed.run``/``launch``), ``ddpdoctor run``/``tune`` (which start torchrun), or a training script of
examples/ or tests/ (scripts/, frameworks/jobs/) started as a process.  A test that does any of these without
the ``live`` marker fails, so ``pytest -m "not live and not slow"`` stays the fast tier."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB_SCRIPT_FOLDERS = (ROOT / "examples", ROOT / "tests" / "scripts", ROOT / "tests" / "frameworks" / "jobs")
TORCH_LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")


def _argv(args) -> list[str]:
    if isinstance(args, (str, bytes, os.PathLike)):
        text = os.fsdecode(args)
        try:
            return shlex.split(text)
        except ValueError:
            return text.split()
    return [os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else str(a) for a in args]


def _job_script(arg: str) -> bool:
    if not arg.endswith(".py"):
        return False
    try:
        path = Path(arg).resolve()
    except (OSError, ValueError):
        return False
    return any(path.is_relative_to(folder) for folder in JOB_SCRIPT_FOLDERS)


def job_launched(args) -> str | None:
    """What job ``args`` (a Popen argument: a list or a shell string) starts, or None."""
    argv = _argv(args)
    names = [os.path.basename(a) for a in argv]
    if "torchrun" in names or any(a in TORCH_LAUNCHERS for a in argv):
        return "torchrun"
    for i, name in enumerate(names[:-1]):
        if name in ("ddpdoctor", "ddpdoctor.cli") and argv[i + 1] in ("run", "tune"):
            return f"ddpdoctor {argv[i + 1]}"
    script = next((a for a in argv if _job_script(a)), None)
    return f"the training script {script}" if script else None
