"""The processes of one `ddpdoctor run`: tied to the parent's life, found by the run id in their
environment, reaped when they outlive the launcher, waited for."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path


def die_with_parent() -> None:
    """In the forked child before exec: if `ddpdoctor run` itself is killed (SIGKILL), the
    launcher gets SIGTERM and stops the ranks, instead of training on unobserved."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no libc by that name, or no prctl: not Linux
        pass


def _pids_of_run(run_id: str) -> list[int]:
    """Live processes (other than this one) whose environment carries this run's id: every
    descendant of the user's command, including daemonized or re-parented ones."""
    me, found = os.getpid(), []
    needle = f"DDPDOCTOR_RUN_ID={run_id}".encode()
    for d in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0") and pid_alive(int(d.name)):
                found.append(int(d.name))
        except OSError:
            continue
    return found


def reap_orphans(run_id: str, grace: float = 3.0, exclude: set[int] = frozenset()) -> list[int]:
    pids = [p for p in _pids_of_run(run_id) if p not in exclude]
    if not pids:
        return []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.time() + grace
        while time.time() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.1)
        if not any(pid_alive(p) for p in pids):
            break
    return pids


def tee_pids(out: Path) -> list[int]:
    pids = []
    for ev in (out / "ranks").glob("rank*/events.jsonl"):
        try:
            for line in ev.read_text().splitlines():
                if '"kind": "start"' in line:
                    pid = json.loads(line).get("tee_pid")
                    if pid:
                        pids.append(int(pid))
        except (OSError, ValueError):
            continue
    return pids


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] != "Z"


def wait_for_exit(pids: list[int], timeout: float) -> None:
    """Each rank's tee process exits once the rank and its children are gone: wait so that
    output.log is complete before the bundle is read."""
    deadline = time.time() + timeout
    while time.time() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
