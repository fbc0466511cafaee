"""What went wrong in a captured run, from the ranks' events, as `ddpdoctor run` prints it (pure Python,
no torch).

torchrun reports the first rank that *exited* with an error; the first rank that *had* a
problem (an OOM it caught, an exception in another thread, a signal) is often another
one. This orders the problem events of all ranks by time."""

from __future__ import annotations

from .bundle.events import load_events, problem_events


def _short(text, limit: int) -> str:
    """The first line of a message, cut at a word boundary (never mid-word) with an ellipsis."""
    first = str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""
    if len(first) <= limit:
        return first
    cut = first[:limit].rsplit(" ", 1)[0].rstrip(",;:.")
    return (cut or first[:limit]) + " …"


def _one_line(e: dict) -> str:
    step = "" if e.get("step") is None else " before any step completed" if e["step"] == 0 else f" at step {e['step']}"
    kind = e.get("kind")
    if kind == "oom":
        caught = " (caught by the script, which went on)" if e.get("caught") else " (uncaught)"
        return f"rank {e.get('rank')}: out of memory{step}{caught}: {_short(e.get('message'), 160)}"
    if kind == "exception":
        typ = str(e.get("type", "")).rsplit(".", 1)[-1]
        thread = f" in thread {e['thread']}" if e.get("thread") else ""
        msg = _short(e.get("message"), 160)
        return f"rank {e.get('rank')}: uncaught {typ}{thread}{step}" + (f": {msg}" if msg else "")
    if kind == "signal":
        return f"rank {e.get('rank')}: received {e.get('signal')}{step}"
    if kind == "stuck_after_peer_stop":
        return f"rank {e.get('rank')}: stuck in a collective{step} after peers stopped (ranks ran different numbers of steps)"
    if kind == "forced_exit":
        return f"rank {e.get('rank')}: did not exit after the window; ended by ddpdoctor"
    return f"rank {e.get('rank')}: {kind}{step}"


def _from_the_interrupt(e: dict, signal_name: str) -> bool:
    """The forwarded signal itself, and the KeyboardInterrupt it raised in a rank."""
    return (e.get("kind") == "signal" and e.get("signal") == signal_name) or (
        e.get("kind") == "exception" and str(e.get("type", "")).endswith("KeyboardInterrupt")
    )


def failure_timeline(paths: list[str], limit: int = 6, interrupted_by: str | None = None) -> list[str]:
    """Problem events of every rank, oldest first, one line each, with the time since the first;
    ``interrupted_by``: leave out that signal and what it raised (the user stopped the run)."""
    out = [
        e for e in problem_events(load_events(paths)) if not (interrupted_by and _from_the_interrupt(e, interrupted_by))
    ]
    if not out:
        return []
    t0 = out[0]["time"]
    lines = [f"+{e['time'] - t0:6.2f} s  {_one_line(e)}" for e in out[:limit]]
    if len(out) > limit:
        lines.append(f"… {len(out) - limit} more in ranks/*/events.jsonl")
    return lines
