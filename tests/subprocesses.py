"""The tests' one way to start a process: this checkout first on PYTHONPATH (the jobs' ranks import the
agent from it, whatever the checkout path), the caller's extra variables on top, text output captured."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# a two-rank CPU job as the live tests launch it (`torchrun --standalone --nproc_per_node=2`)
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def project_env(extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the checkout first on PYTHONPATH, then ``extra``."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def run_python(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
    cwd: str | os.PathLike | None = None,
    **kwargs,
) -> subprocess.CompletedProcess:
    """``python ARGS`` (this interpreter) with :func:`project_env` (``env``: extra variables), output as text."""
    return subprocess.run(
        [sys.executable, *map(str, args)],
        env=project_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        **kwargs,
    )


def run_ddpdoctor(args: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
    """``python -m ddpdoctor ARGS`` as :func:`run_python` runs it."""
    return run_python(["-m", "ddpdoctor", *map(str, args)], **kwargs)


def free_port() -> str:
    """A TCP port on 127.0.0.1 that nothing listens on now: a job's MASTER_PORT / rendezvous port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])
