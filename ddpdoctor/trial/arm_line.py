"""What a trial prints per arm run: one line (which arm, repeat, steps, median step time); the job's own
output stays in the arm's bundle (each rank's ``ranks/rankN/output.log``, the launcher's ``launcher.log``).
A failed arm adds the last lines of its error output, so the error is seen without opening the bundle."""

from __future__ import annotations

import statistics
from pathlib import Path

from ..capture.host.streams import strip_profiler_noise

ERROR_LINES = 6
_ERROR_MARKS = ("Traceback", "Error", "error:", "Exception", "Killed", "Aborted")


def arm_line(rec: dict, shown: str | None = None, label: str | None = None) -> str:
    """``trial try #1 (dataloader.num_workers=8): 20 steps, median step 41.2 ms`` and the like; ``label``
    replaces "trial ARM #N" (tune's baseline)."""
    head = "ddpdoctor: " + (label or f"trial {rec['arm']} #{rec['repeat']}") + (f" ({shown})" if shown else "")
    times = rec.get("step_times_ms") or []
    steps = f"{len(times)} step" + ("" if len(times) == 1 else "s")
    measured = f"{steps}, median step {statistics.median(times):.1f} ms" if times else "no steps recorded"
    if rec.get("interrupted_by"):
        return f"{head}: interrupted ({rec['interrupted_by']}); {measured}"
    if rec.get("failed") and rec.get("exit_code"):
        return f"{head}: failed (exit {rec['exit_code']}); {measured}"
    if not times:
        return f"{head}: {measured}" + (f" (see {rec['bundle']})" if rec.get("bundle") else "")
    return f"{head}: {measured}"


def error_tail(bundle: Path, n: int = ERROR_LINES) -> tuple[list[str], Path | None]:
    """The last ``n`` lines of the first log in the bundle that holds an error (a rank's output, else the
    launcher's), without the profiler's status chatter; ([], None) when no log names an error."""
    logs = sorted(Path(bundle).glob("ranks/rank*/output.log")) + [Path(bundle) / "launcher.log"]
    for log in logs:
        try:
            raw = log.read_bytes()
        except OSError:
            continue
        lines = [strip_profiler_noise(ln + b"\n").decode("utf-8", "replace").rstrip() for ln in raw.splitlines()]
        lines = [ln for ln in lines if ln.strip()]
        if any(m in ln for ln in lines for m in _ERROR_MARKS):
            return lines[-n:], log
    return [], None


def arm_report(rec: dict, shown: str | None = None, label: str | None = None) -> list[str]:
    """The arm's line, and for a failed arm the last lines of its error and where the rest is."""
    out = [arm_line(rec, shown, label)]
    if rec.get("failed") and rec.get("exit_code") and not rec.get("interrupted_by"):
        tail, log = error_tail(Path(rec["bundle"])) if rec.get("bundle") else ([], None)
        out += [f"  | {ln}" for ln in tail]
        if log is not None:
            out.append(f"  (all of it: {log})")
    return out
