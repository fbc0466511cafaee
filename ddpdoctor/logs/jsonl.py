"""``events.jsonl`` written per rank by ``ddpdoctor run``: one JSON object per line.

Accepted keys (several spellings, so older and newer capture versions read the same):
``rank``; ``time`` | ``ts`` | ``timestamp`` (seconds since the epoch, or ISO text);
``kind`` | ``type`` | ``event`` (``step``/``step_end``/``progress``, ``exception``/``error``,
``oom``, ``exit``, ``signal``…); ``step`` | ``steps_completed`` | ``last_step``;
``message`` | ``msg`` | ``text`` | ``error``; ``exc_type`` | ``exception``;
``exitcode`` | ``exit_code`` | ``code``; ``signal``.
"""

from __future__ import annotations

import json
from datetime import datetime

from ..errors import InputError
from ..text import plural
from . import patterns as P
from .model import LogEvent


def _first(d: dict, *keys):
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return None


def _time(v) -> float | None:
    if isinstance(v, (int, float)):
        return float(v) / 1e9 if v > 1e14 else float(v)
    if isinstance(v, str):
        try:
            dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
            return dt.timestamp()
        except ValueError:
            return None
    return None


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _exit_events(d: dict, rank, t, step, file: str, no: int, base: dict) -> list[LogEvent]:
    """An exit/signal record: the last step it names, the exit (code and signal), a kill by that signal."""
    events = []
    code = _int(_first(d, "exitcode", "exit_code", "code", "returncode"))
    sig = _first(d, "signal", "signal_name")
    if isinstance(sig, int):
        sig = P.SIGNALS.get(sig, f"signal {sig}")
    if sig is None and code is not None and code < 0:
        sig = P.SIGNALS.get(-code)
    if sig is None and code is not None and code > 128:
        sig = P.SIGNALS.get(code - 128)
    if step is not None and step >= 0:
        events.append(LogEvent(rank, t, "progress", f"step {step}", file, no, dict(base, step=step)))
    if code is not None or sig:
        events.append(
            LogEvent(
                rank,
                t,
                "exit",
                f"exit code {code}" + (f" ({sig})" if sig else ""),
                file,
                no,
                dict(base, exitcode=code, signal=sig),
            )
        )
        if sig:
            events.append(LogEvent(rank, t, "killed", f"killed by {sig}", file, no, dict(base, signal=sig)))
    return events


def parse_events(
    text: str, file: str, path_rank: int | None, warnings: list[str] | None = None
) -> tuple[list[LogEvent], list[tuple]]:
    events, lines = [], []
    too_deep = 0
    for no, raw in enumerate(text.splitlines(), 1):
        raw = raw.strip()
        if not raw:
            continue
        try:
            d = json.loads(raw)
        except ValueError:
            continue
        except RecursionError:  # one hostile record: skipped, the others read
            too_deep += 1
            continue
        if not isinstance(d, dict):
            continue
        rank = _int(_first(d, "rank", "global_rank"))
        rank = path_rank if rank is None else rank
        t = _time(_first(d, "time", "ts", "timestamp", "t"))
        kind = str(_first(d, "kind", "type", "event", "name") or "").lower()
        msg = str(_first(d, "message", "msg", "text", "error", "detail") or "")
        etype = _first(d, "exc_type", "exception", "exception_type", "error_type")
        if etype is None and "kind" in d:  # ddpdoctor run: kind = event, type = exception type
            etype = d.get("type")
        if isinstance(etype, str) and etype.startswith("builtins."):
            etype = etype[len("builtins.") :]
        step = _int(_first(d, "step", "last_step", "iteration"))
        if step is None and _int(d.get("steps_completed")) is not None:
            step = _int(d["steps_completed"]) - 1  # a count of steps: the last step index is one less
        lines.append((no, raw, rank, None, None, t))
        base = dict(source="events.jsonl")
        if kind in ("oom", "out_of_memory", "cuda_oom") or P.OOM.search(msg) or (etype and "OutOfMemory" in str(etype)):
            a, g = P.OOM_ALLOC.search(msg or ""), P.OOM_GPU.search(msg or "")
            events.append(
                LogEvent(
                    rank,
                    t,
                    "oom",
                    msg or str(etype),
                    file,
                    no,
                    dict(
                        base,
                        step=step,
                        exc_type=etype,
                        tried=a.group(1) if a else None,
                        gpu=int(g.group(1)) if g else None,
                    ),
                )
            )
            continue
        if kind in ("stuck_after_peer_stop", "stuck", "hang"):
            events.append(
                LogEvent(
                    rank,
                    t,
                    "stuck",
                    msg or "no progress while a peer has stopped",
                    file,
                    no,
                    dict(base, step=step, peers_done=d.get("peers_done")),
                )
            )
            continue
        if kind in ("exception", "error", "crash") or (etype and kind not in ("exit", "signal", "step")):
            cat = (
                "timeout"
                if P.GLOO_TIMEOUT.search(msg) or P.WATCHDOG.search(msg)
                else "peer"
                if P.PEER.search(msg)
                else "other"
            )
            events.append(
                LogEvent(
                    rank,
                    t,
                    "exception",
                    f"{etype or 'Exception'}: {msg}",
                    file,
                    no,
                    dict(base, exc_type=etype, message=msg, category=cat, step=step, traceback=_traceback(d)),
                )
            )
            continue
        if kind in ("exit", "end", "finish", "status", "signal"):
            events.extend(_exit_events(d, rank, t, step, file, no, base))
            continue
        if step is not None and kind in (
            "",
            "step",
            "step_end",
            "step_begin",
            "progress",
            "iteration",
            "optimizer_step",
        ):
            events.append(LogEvent(rank, t, "progress", f"step {step}", file, no, dict(base, step=step)))
    if too_deep and warnings is not None:
        warnings.append(f"skipped {plural(too_deep, 'record')} of {file}: JSON nested too deeply")
    return events, lines


def parse_error_file(text: str, file: str, path_rank: int | None, local: bool) -> list[LogEvent]:
    """torchrun's ``error.json`` of a rank (written by ``@record``): the exception and its time.
    A record nested too deeply to decode is an InputError (the caller skips it with a warning)."""
    try:
        d = json.loads(text)
    except ValueError:
        return []
    except RecursionError:
        raise InputError(f"{file}: JSON nested too deeply") from None
    m = d.get("message") if isinstance(d, dict) else None
    if isinstance(m, str):
        m = {"message": m}
    if not isinstance(m, dict) or not isinstance(m.get("message"), str):
        return []
    msg = m["message"]
    extra = m.get("extraInfo") if isinstance(m.get("extraInfo"), dict) else {}
    t = _time(_int(extra.get("timestamp")))
    etype, _, rest = msg.partition(": ")
    data = {"source": "error.json", "exc_type": etype, "message": rest[:1000]}
    if local:
        data["_local"] = path_rank
    rank = None if local else path_rank
    cat = (
        "oom"
        if P.OOM.search(msg)
        else "timeout"
        if P.GLOO_TIMEOUT.search(msg) or P.WATCHDOG.search(msg)
        else "peer"
        if P.PEER.search(msg)
        else "mismatch"
        if P.DESYNC.search(msg)
        else "other"
    )
    events = [LogEvent(rank, t, "exception", msg[:2000], file, 1, dict(data, category=cat))]
    if cat == "oom":
        events.append(LogEvent(rank, t, "oom", msg[:2000], file, 1, dict(data)))
    return events


def _traceback(d: dict) -> str | None:
    """The exception's formatted traceback (``ddpdoctor run`` records it): its frames name the call site."""
    tb = d.get("traceback")
    return tb[-20000:] if isinstance(tb, str) else None
