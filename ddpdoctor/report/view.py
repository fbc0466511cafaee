"""What every report format derives from the diagnosis dict (``ddpdoctor.diagnosis/1``):
the headline, the categories of the step-time partition, which ranks to show with many
ranks, number formatting.  Pure Python (no matplotlib, no traces)."""

from __future__ import annotations

import json
import statistics

MAX_RANKS_SHOWN = 16

# the exclusive categories of a step, in drawing order, with labels and colours
CATEGORIES = (
    ("compute", "compute", "#4c9a2a"),
    ("comm_exposed", "exposed comm (transfer)", "#b5179e"),
    ("comm_sync_wait", "waiting for a late peer", "#ffb3c6"),
    ("memcpy", "memcpy", "#7209b7"),
    ("dataloader_wait", "DataLoader wait", "#f4a261"),
    ("host_idle", "GPU idle, host busy", "#e76f51"),
    ("other", "other / idle", "#adb5bd"),
)
LABEL = {c: lab for c, lab, _ in CATEGORIES}
COLOR = {c: col for c, _, col in CATEGORIES}


def ms(us) -> str:
    return "–" if us is None else f"{us / 1000:.2f}"


def pct(share) -> str:
    return "–" if share is None else f"{100 * share:.1f} %"


def headline(d: dict) -> str:
    """The verdict in one line; a failure comes before any performance verdict."""
    v = d.get("verdict") or {}
    perf = ""
    if v.get("bottleneck"):
        perf = v.get("label") or f"{v['bottleneck']}-bound"
        if v.get("confidence") is not None:
            perf += f" (confidence {v.get('confidence_label')}, {v['confidence']:.2f})"
    if v.get("failed"):
        first = next(
            (f for f in d.get("findings") or [] if f.get("category") in ("failure", "network", "memory")), None
        )
        head = "the run failed" + (f": {first['title']}" if first and first.get("title") else "")
        return head + (f" (recorded steps: {perf})" if perf else "")
    return perf or "no performance verdict"


def verdict_summary(d: dict) -> str:
    v = d.get("verdict") or {}
    s = v.get("summary") or ""
    label = v.get("label")
    if label and s.startswith(label + ": "):
        s = s[len(label) + 2 :]
    return s


def analysis(d: dict) -> dict | None:
    a = d.get("analysis")
    return a if isinstance(a, dict) and a.get("ranks") else None


def partition(d: dict) -> list[str]:
    """The exclusive categories of a step, with the wait for late peers split out of exposed
    communication (so a waiting rank's time does not read as a slow network)."""
    a = analysis(d) or {}
    kinds = {r.get("device_kind") for r in (a.get("ranks") or {}).values()}
    part = list((a.get("partition") or {}).get("gpu" if "gpu" in kinds else "cpu") or [c for c, _, _ in CATEGORIES])
    if "comm_exposed" in part and any(
        ((r.get("mean_us") or {}).get("comm_sync_wait") or 0) > 0 for r in (a.get("ranks") or {}).values()
    ):
        part.append("comm_sync_wait")
    return [c for c, _, _ in CATEGORIES if c in part]


def segment(row: dict, c: str, key: str = "mean_us") -> float | None:
    """A rank's value of a partition category (``key``: "mean_us" or "share"); exposed communication
    less the part spent waiting for late peers, which is its own segment."""
    vals = row.get(key) or {}
    if c not in ("comm_exposed", "comm_sync_wait"):
        return vals.get(c)
    exposed = vals.get("comm_exposed")
    if exposed is None:
        return None
    wait = min(exposed, max(0.0, vals.get("comm_sync_wait") or 0.0))
    return wait if c == "comm_sync_wait" else exposed - wait


def rank_ids(d: dict) -> list[str]:
    a = analysis(d) or {}
    return sorted((a.get("ranks") or {}), key=lambda r: int(r) if str(r).lstrip("-").isdigit() else 0)


def step_ms(d: dict, r: str) -> float | None:
    v = ((analysis(d) or {}).get("ranks", {}).get(r, {}).get("mean_us") or {}).get("step_time")
    return None if v is None else v


def stragglers(d: dict) -> list[dict]:
    return list(((analysis(d) or {}).get("cross_rank") or {}).get("stragglers") or [])


def select_ranks(d: dict, limit: int = MAX_RANKS_SHOWN) -> tuple[list[str], str | None]:
    """All ranks when few; else fastest, median, slowest (two each) and stragglers."""
    ids = rank_ids(d)
    if len(ids) <= limit:
        return ids, None
    by = sorted(ids, key=lambda r: (step_ms(d, r) or 0.0, int(r)))
    keep = {by[0], by[1], by[len(by) // 2], by[len(by) // 2 - 1], by[-2], by[-1]}
    keep |= {str(s["rank"]) for s in stragglers(d)[: limit - len(keep)]}
    chosen = [r for r in ids if r in keep]
    return chosen, (
        f"showing {len(chosen)} of {len(ids)} ranks: the fastest, median and slowest by step time, and the stragglers"
    )


def spread(d: dict, col: str) -> dict | None:
    """Min / p10 / median / p90 / max over ranks of a column's mean (µs)."""
    a = analysis(d) or {}
    vals = sorted(v for r in (a.get("ranks") or {}).values() if (v := (r.get("mean_us") or {}).get(col)) is not None)
    if not vals:
        return None

    def q(p: float) -> float:
        return vals[min(len(vals) - 1, max(0, round(p * (len(vals) - 1))))]

    return {"min": vals[0], "p10": q(0.1), "median": statistics.median(vals), "p90": q(0.9), "max": vals[-1]}


def fix_is_diff(change: str) -> bool:
    """A fix reads as a diff when it adds lines (``+ …``); ``- `` bullets alone are prose."""
    return any(x.startswith("+") for x in change.splitlines())


def fix_lang(fx: dict) -> str:
    """The code-block language of a fix: diff, python, bash or plain."""
    change = fx.get("change") or ""
    if fix_is_diff(change):
        return "diff"
    return {"env": "bash", "command": "bash"}.get(fx.get("kind") or "", "")


def findings(d: dict) -> list[dict]:
    return list(d.get("findings") or [])


# A log event's kind (logs.model.KINDS) in the words a ticket reader knows.
EVENT_WORDS = {
    "oom": "out of memory",
    "nccl_timeout": "NCCL timeout",
    "work_state": "NCCL work state",
    "dump_signal": "Flight Recorder dump",
    "gloo_timeout": "gloo timeout",
    "nccl_warn": "NCCL warning",
    "nccl_error": "NCCL error",
    "torchrun_root": "torchrun's root cause",
    "torchrun_failure": "torchrun failure",
    "mismatch": "collective mismatch",
    "network": "network fault",
    "net_setting": "network setting",
}


def event_kind(kind) -> str:
    """A log event's kind in words: ``torchrun_root`` → "torchrun's root cause", ``peer_error`` → "peer error"."""
    return EVENT_WORDS.get(kind) or str(kind or "").replace("_", " ")


def event_rank(e: dict) -> str:
    """A log event's rank column: its rank, else who wrote the line (torchrun's summary and ChildFailedError
    name no rank of their own: the launcher), never a question mark."""
    if e.get("rank") is not None:
        return str(e["rank"])
    return "launcher" if from_launcher(e) else "no rank named"


def from_launcher(e: dict) -> bool:
    """A line the launcher wrote (its log, torchrun's summary, ChildFailedError), not a rank."""
    name = str(e.get("file") or "").replace("\\", "/").rsplit("/", 1)[-1]
    return (
        str(e.get("kind") or "").startswith("torchrun")
        or name == "launcher.log"
        or "ChildFailedError" in str(e.get("text") or "")
    )


def log_events(d: dict) -> list[dict]:
    return list((d.get("logs") or {}).get("events") or [])


def plain(text) -> str:
    """Text without pictographs (``GLHF! 🏖️``): report fonts often lack them and show boxes."""
    import unicodedata

    s = "" if text is None else str(text)
    return "".join(
        ch
        for ch in s
        if not (ord(ch) > 0x2100 and unicodedata.category(ch) in ("So", "Sk", "Cs")) and ch not in "\ufe0e\ufe0f\u200d"
    ).rstrip()


def timed_events(d: dict) -> tuple[list[tuple[float, dict]], bool]:
    """Log events placed in time across ranks: an untimed line takes the time of the last
    timestamped line before it in the same file (else the next one), or, in a file with no
    timestamp at all, the time of the same error text on the same rank in another file.  Returns (time, event)
    pairs and whether every failure event got a time; when not, the caller must not draw
    them on one time axis."""
    events = [e for e in log_events(d) if e.get("kind")]
    anchors: dict = {}
    twins: dict = {}
    for e in events:
        if isinstance(e.get("time"), (int, float)):
            if e.get("line_no") is not None:
                anchors.setdefault(e.get("file"), []).append((e["line_no"], e["time"]))
            if e.get("kind") != "progress" and e.get("text"):
                twins.setdefault((e.get("rank"), e["text"]), e["time"])
    out, complete = [], True
    for e in events:
        t = e.get("time") if isinstance(e.get("time"), (int, float)) else None
        if t is None and e.get("line_no") is not None and anchors.get(e.get("file")):
            lines = sorted(anchors[e.get("file")])
            before = [tt for ln, tt in lines if ln <= e["line_no"]]
            t = before[-1] if before else lines[0][1]
        if t is None and e.get("kind") != "progress" and e.get("text"):
            # the same error text on the same rank, timed in another of its files (the agent's
            # events.jsonl beside the untimed stderr in output.log): one error, one time
            t = twins.get((e.get("rank"), e["text"]))
        if t is None:
            complete = complete and e.get("kind") == "progress"
            continue
        out.append((float(t), e))
    out.sort(key=lambda p: (p[0], str(p[1].get("file")), p[1].get("line_no") or 0))
    return out, complete


def _evidence_key(k: str) -> tuple[str, str]:
    """(words, unit) of an evidence key: ``extra_us`` → ("extra", "us"), ``wait_share`` → ("wait", "share")."""
    for unit in ("us", "share", "mb", "bytes"):
        if k.endswith("_" + unit):
            return k[: -len(unit) - 1].replace("_", " "), unit
    return k.replace("_", " "), ""


# the words of a rule's evidence names, where the name abbreviates (the exposed-communication rule's `colls`,
# `bcast_n`, `grad_mb`)
EVIDENCE_WORDS = {
    "colls": "collectives per step",
    "bcast": "forward broadcasts",
    "bcast n": "forward broadcasts per step",
    "grad": "gradients",
    "grad us": "exposed gradient all-reduce per step",
    "bcast us": "exposed forward broadcasts per step",
    "loop us": "exposed training-loop collectives per step",
    "other us": "exposed other collectives per step",
    "loop": "training-loop collectives",
    "loop n": "training-loop collectives per step",
    "synced": "gradient syncs per optimizer step",
    "micro": "micro-batches per optimizer step",
    "comm": "communication",
    "bucket cap": "bucket_cap_mb",
    "buckets": "gradient buckets",
    "cpus": "CPUs",
    "job cpus": "CPUs of the job",
    "steal": "CPU steal",
}
# evidence a rule computes to choose its text or its suggestion (a suggested value, a threshold crossed), not a
# measurement of the job: not listed under "Measured"
_SUGGESTION = ("smaller_", "larger_", "suggested", "hook")


def evidence_items(ev: dict) -> list[str]:
    """A finding's evidence in words: units applied, column names as phrases, no raw keys; only what was measured
    of this job: not the rule's own decisions (yes/no), suggestions (a hook, a bucket size to try) or a zero
    (what the job does not do)."""
    from ..text import PHASE_WORDS

    out = []
    for k, v in (ev or {}).items():
        words, unit = _evidence_key(str(k))
        words = EVIDENCE_WORDS.get(str(k).replace("_", " "), EVIDENCE_WORDS.get(words, words))
        if isinstance(v, bool) or type(v).__name__ in ("bool_", "bool") or str(k).startswith(_SUGGESTION):
            continue
        if v is None or (isinstance(v, (str, list, dict)) and not v):
            continue
        if isinstance(v, (int, float)) and v == 0:
            continue
        if isinstance(v, (int, float)) and unit == "us":
            text = f"{v / 1000:.1f} ms" if abs(v) >= 1000 else f"{v:.0f} µs"
        elif isinstance(v, (int, float)) and unit == "share":
            text = f"{100 * v:.0f} %"
        elif isinstance(v, (int, float)) and unit == "mb":
            text = f"{v:.3g} MB"
        elif isinstance(v, str) and v in PHASE_WORDS:
            text = PHASE_WORDS[v]
        elif isinstance(v, list) and all(isinstance(x, (int, float, str)) for x in v):
            text = ", ".join(evidence_value(x) for x in v[:16]) + (f", … ({len(v)})" if len(v) > 16 else "")
        else:
            text = evidence_value(v, 120)
        out.append(f"{words} {text}" if not isinstance(v, str) or v not in PHASE_WORDS else f"{words}: {text}")
    return out


def evidence_value(v, limit: int = 300) -> str:
    """An evidence value as short plain text (escape it for the output format afterwards)."""
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    if isinstance(v, (dict, list)):
        s = json.dumps(v, default=str)
        return s if len(s) <= limit else s[:limit] + " …"
    return "" if v is None else str(v)


def ordered_events(d: dict) -> list[dict]:
    """The log events for a table: failure events (else all) in time order across ranks when every
    one can be placed in time, else rank by rank in each log's own order."""
    events = log_events(d)
    key = [e for e in events if e.get("kind") != "progress"] or events
    timed, complete = timed_events(d)
    if complete and timed:
        ids = {id(e) for e in key}
        return [e for _, e in timed if id(e) in ids]
    return sorted(
        key, key=lambda e: (e.get("rank") is None, e.get("rank") or 0, str(e.get("file")), e.get("line_no") or 0)
    )
