"""The facts of each kind of failure evidence (``failure.<kind>.*``), one function per kind; causal.py calls
them in order and then picks the root cause.  Each function adds its facts to ``f`` and returns the events
the later kinds and the root-cause choice need."""

from __future__ import annotations

import re
from collections import Counter

from .mismatch_quotes import QUOTE_KEYS, model_check_facts, side_facts
from .model import LogEvent
from .patterns import ADDRESS_IN_USE
from .watchdog_teardown import watchdog_teardown

LAUNCHER_SIGNALS = {"SIGTERM", "SIGINT", "SIGHUP"}
_DIGITS = re.compile(r"\d+")
# an exception line that is the store/rendezvous failure itself (that kind's evidence, not an own error)
_RENDEZVOUS_WORDS = ("clients joined", "workers joined", "socket has", "Rendezvous", "store based", "DistStoreError")


def first(evs: list[LogEvent]) -> LogEvent | None:
    """Earliest event: by time where both are known, else by position (events come in file order)."""
    if not evs:
        return None
    timed = [e for e in evs if e.time is not None]
    return min(timed, key=lambda e: e.time) if timed else evs[0]


def ranks_of(evs) -> list[int]:
    return sorted({e.rank for e in evs if e.rank is not None})


def progress(g, f: dict) -> dict[int, int]:
    last_step: dict[int, int] = {}
    for e in g("progress"):
        if e.rank is not None:
            last_step[e.rank] = max(e.data["step"], last_step.get(e.rank, -1))
    f["failure.progress.last_step"] = {str(r): s for r, s in sorted(last_step.items())}
    f["failure.progress.max_step"] = max(last_step.values()) if last_step else None
    return last_step


def oom(g, f: dict) -> LogEvent | None:
    ooms = list(g("oom"))
    o = first([e for e in ooms if e.rank is not None]) or first(ooms)
    f.update(
        {
            "failure.oom.present": bool(ooms),
            "failure.oom.ranks": ranks_of(ooms),
            "failure.oom.first_rank": o.rank if o else None,
            "failure.oom.gpus": sorted({e.data["gpu"] for e in ooms if e.data.get("gpu") is not None}),
            "failure.oom.first_time": o.time if o else None,
            "failure.oom.tried": o.data.get("tried") if o else None,
            "failure.oom.text": o.text[:300] if o else None,
        }
    )
    # the script caught the first OOM and went on: its rank logged a step after it (a rank that skips a batch
    # runs one collective fewer than its peers, which then wait for it); None when no step times are logged
    later = [e for e in g("progress") if o is not None and e.rank == o.rank and e.time is not None]
    f["failure.oom.caught"] = (
        None if o is None or o.rank is None or o.time is None or not later else any(e.time > o.time for e in later)
    )
    return o


def kills(g, f: dict) -> tuple:
    """(first kill, kills, launcher/tear-down terminations, tear-down SIGABRTs, crashes)."""
    # ranks that were waiting in a collective: their SIGABRT is the watchdog's tear-down, not a cause
    waited = {
        e.rank
        for e in g("nccl_timeout")
        + g("gloo_timeout")
        + g("work_state")
        + g("peer_error")
        + g("stuck")
        + g("nccl_error")
        + [x for x in g("exception") if x.data.get("category") in ("timeout", "peer")]
    }
    # (once any rank waited in a collective, every SIGABRT is taken as that tear-down)
    teardown = [e for e in g("killed") if e.data.get("signal") == "SIGABRT" and waited]
    killed = [e for e in g("killed") if e.data.get("signal") not in LAUNCHER_SIGNALS and e not in teardown]
    term = [e for e in g("killed") if e.data.get("signal") in LAUNCHER_SIGNALS or e in teardown]
    k = (
        first([e for e in killed if e.rank is not None and e.data.get("root")])
        or first([e for e in killed if e.rank is not None])
        or first(killed)
    )
    f.update(
        {
            "failure.killed.present": bool(killed),
            "failure.killed.ranks": ranks_of(killed),
            "failure.killed.rank": k.rank if k else None,
            "failure.killed.signal": k.data.get("signal") if k else None,
            "failure.killed.exitcode": k.data.get("exitcode") if k else None,
            "failure.killed.terminated_ranks": ranks_of(term),
            "failure.killed.host_oom": any(e.data.get("host_oom") for e in killed),
        }
    )
    # a rank's abort after its own collective timed out is the watchdog's tear-down of that rank, not a crash
    timed_out = (
        g("nccl_timeout") + g("gloo_timeout") + [x for x in g("exception") if x.data.get("category") == "timeout"]
    )
    aborts = [e for e in g("crash") if watchdog_teardown(e, timed_out)]
    crashes = [e for e in g("crash") if e not in aborts]
    teardown, term = teardown + aborts, term + aborts
    f["failure.killed.terminated_ranks"] = ranks_of(term)
    f["failure.crash.ranks"] = ranks_of(crashes)
    return k, killed, term, teardown, crashes


def exceptions(g, f: dict, known: set, world_size: int | None) -> tuple:
    """(the first own exception, every exception, the own ones)."""
    excs = g("exception")
    own_any = [
        e
        for e in excs
        if e.data.get("category") == "other"
        and not any(w in e.text for w in _RENDEZVOUS_WORDS)
        and "ChildFailedError" not in (e.data.get("exc_type") or "")
    ]
    own_exc = [e for e in own_any if e.rank is not None]
    if not own_exc and not known:  # a single pasted log without rank marks: its error still counts
        own_exc = [e for e in own_any if e.data.get("source") != "error.json"]
    x = first(own_exc)
    f.update(
        {
            "failure.exception.ranks": ranks_of(excs),
            "failure.exception.own_ranks": ranks_of(own_exc),
            "failure.exception.first_rank": x.rank if x else None,
            "failure.exception.type": x.data.get("exc_type") if x else None,
            "failure.exception.message": (x.data.get("message") or "")[:300] if x else None,
        }
    )
    # every rank raised the same error (rank numbers aside): a shared cause, not one rank with symptoms elsewhere
    same = {r for r in ranks_of(own_exc) if x is not None and any(e.rank == r and _same_error(e, x) for e in own_exc)}
    f["failure.exception.shared"] = bool(
        x is not None and len(same) >= 2 and same >= (set(range(world_size)) if world_size else known)
    )
    return x, excs, own_exc


def timeouts(g, f: dict, excs, teardown, world_size: int | None) -> tuple:
    """(the first timeout, the ranks that waited, the sequence number each rank timed out at)."""
    tos = g("nccl_timeout") + g("gloo_timeout") + [e for e in excs if e.data.get("category") == "timeout"]
    nto = g("nccl_timeout")
    seq_by_rank: dict[int, int] = {}
    op_by_rank: dict[int, str] = {}
    states = [e for e in g("work_state") if e.rank is not None]
    pgs = Counter(e.data.get("pg") for e in nto + states if e.data.get("pg") is not None)
    main_pg = pgs.most_common(1)[0][0] if pgs else None
    for e in nto:
        if e.rank is None or e.data.get("pg") not in (None, main_pg) or "seq" not in e.data:
            continue
        if e.rank not in seq_by_rank or e.data["seq"] < seq_by_rank[e.rank]:
            seq_by_rank[e.rank], op_by_rank[e.rank] = e.data["seq"], e.data.get("op")
    for e in states:
        if e.rank not in seq_by_rank and e.data.get("pg") in (None, main_pg):
            seq_by_rank[e.rank] = e.data["at"]
    t0 = first(nto) or first(tos)
    ops = Counter(e.data.get("op") for e in nto if e.data.get("op"))
    waiting = ranks_of(
        tos
        + g("work_state")
        + g("dump_signal")
        + g("peer_error")
        + g("stuck")
        + teardown
        + [e for e in excs if e.data.get("category") == "peer"]
    )
    f.update(
        {
            "failure.timeout.present": bool(tos),
            "failure.timeout.ranks": ranks_of(tos),
            "failure.timeout.backend": "nccl" if nto else ("gloo" if tos else None),
            "failure.timeout.op": ops.most_common(1)[0][0] if ops else (t0.data.get("op") if t0 else None),
            "failure.timeout.seq": min(seq_by_rank.values()) if seq_by_rank else (t0.data.get("seq") if t0 else None),
            "failure.timeout.seq_by_rank": {str(r): s for r, s in sorted(seq_by_rank.items())},
            "failure.timeout.op_by_rank": {str(r): s for r, s in sorted(op_by_rank.items())},
            "failure.timeout.seqs": sorted({e.data["seq"] for e in nto if "seq" in e.data}),
            "failure.timeout.timeout_ms": next(
                (e.data.get("timeout_ms") for e in tos if e.data.get("timeout_ms")), None
            ),
            "failure.timeout.ran_ms": max((e.data.get("ran_ms", 0) for e in nto), default=None) or None,
            "failure.timeout.numel": next((e.data.get("numel_in") for e in nto if e.data.get("numel_in")), None),
            "failure.timeout.pg": main_pg if main_pg is not None else (0 if nto else None),
            "failure.timeout.last_enqueued": {str(e.rank): e.data["enqueued"] for e in states},
            "failure.timeout.last_completed": {str(e.rank): e.data["completed"] for e in states},
            "failure.timeout.enqueued_ahead": max((e.data["enqueued"] - e.data["at"] for e in states), default=None),
            "failure.timeout.first_rank": t0.rank if t0 else None,
            "failure.timeout.first_time": t0.time if t0 else None,
            "failure.timeout.dump_from_rank": next(
                (e.data.get("from_rank") for e in g("dump_signal") if e.data.get("from_rank") is not None), None
            ),
            "failure.timeout.silent_ranks": (
                sorted(set(range(world_size)) - set(waiting)) if world_size and waiting else []
            ),
        }
    )
    f["failure.timeout.timeout_s"] = (
        f["failure.timeout.timeout_ms"] / 1000.0 if f["failure.timeout.timeout_ms"] else None
    )
    return t0, tos, waiting, seq_by_rank


def seq_behind(f: dict, seq_by_rank: dict[int, int]) -> None:
    f.update(
        {
            "failure.seq_behind.rank": None,
            "failure.seq_behind.by": None,
            "failure.seq_behind.seq": None,
            "failure.seq_behind.max_seq": None,
            "failure.seq_behind.ranks": [],
        }
    )
    if len(seq_by_rank) > 1 and max(seq_by_rank.values()) > min(seq_by_rank.values()):
        low = min(seq_by_rank.values())
        behind = sorted(r for r, s in seq_by_rank.items() if s == low)
        f.update(
            {
                "failure.seq_behind.rank": behind[0],
                "failure.seq_behind.ranks": behind,
                "failure.seq_behind.seq": low,
                "failure.seq_behind.max_seq": max(seq_by_rank.values()),
                "failure.seq_behind.by": max(seq_by_rank.values()) - low,
            }
        )


def mismatch(g, f: dict) -> LogEvent | None:
    mm = g("mismatch")
    m = first(mm)
    f["failure.mismatch.present"] = bool(mm)
    for key in (
        "rank_a",
        "rank_b",
        "op_a",
        "op_b",
        "seq_a",
        "seq_b",
        "shape_a",
        "shape_b",
        "dtype_a",
        "dtype_b",
        "behind_rank",
        "text",
        *QUOTE_KEYS,
    ):
        f[f"failure.mismatch.{key}"] = None
    f["failure.mismatch.ranks"], f["failure.mismatch.aspects"] = [], []
    if not m:
        return None
    a, b = m.data.get("a") or {}, m.data.get("b") or {}
    ra, rb = m.data.get("rank_a"), m.data.get("rank_b")
    if m.data.get("aspect") == "model":
        model_check_facts(m, f)
        ra = m.rank if ra is None else ra  # DDP's size check: the rank that logs it is the one that differs
    if rb is None and a and m.data.get("aspect") != "model":
        # the older form: each rank reports only its own fingerprint ("Rank 0 is running inconsistent
        # collective: …", then the same line from rank 1): pair it with another rank's report
        other = next(
            (
                e
                for e in mm
                if e.data.get("rank_b") is None and e.data.get("a") and e.data.get("rank_a") not in (None, ra)
            ),
            None,
        )
        if other is not None:
            rb, b = other.data["rank_a"], other.data["a"]
    sa, sb = _int(a.get("SequenceNumber")), _int(b.get("SequenceNumber"))
    aspects = [
        n
        for n, key in (
            ("op", "OpType"),
            ("sequence", "SequenceNumber"),
            ("shape", "TensorShape"),
            ("dtype", "TensorDtypes"),
        )
        if key in a and key in b and a.get(key) != b.get(key)
    ]
    if m.data.get("aspect") and m.data["aspect"] not in aspects:
        aspects.append(m.data["aspect"])
    if sa is not None and sb is not None and sa != sb:
        behind = ra if sa < sb else rb
    else:  # DDP's construction check: rank_a is the rank whose model differs
        behind = ra if m.data.get("aspect") == "model" or rb is None else rb
    f.update(
        {
            "failure.mismatch.rank_a": ra,
            "failure.mismatch.rank_b": rb,
            "failure.mismatch.ranks": sorted({r for r in (ra, rb) if r is not None}),
            "failure.mismatch.op_a": a.get("OpType"),
            "failure.mismatch.op_b": b.get("OpType"),
            "failure.mismatch.seq_a": sa,
            "failure.mismatch.seq_b": sb,
            "failure.mismatch.shape_a": a.get("TensorShape"),
            "failure.mismatch.shape_b": b.get("TensorShape"),
            "failure.mismatch.dtype_a": a.get("TensorDtypes"),
            "failure.mismatch.dtype_b": b.get("TensorDtypes"),
            "failure.mismatch.aspects": aspects,
            "failure.mismatch.behind_rank": behind,
            "failure.mismatch.text": m.text[:400],
        }
    )
    side_facts(f)
    return m


def remote_errors(g, f: dict, excs) -> tuple:
    """(the first peer error, every peer error): did the peer's process end, or did the network drop it?"""
    peers = g("peer_error") + [e for e in excs if e.data.get("category") == "peer"]
    p = first(peers)
    f.update(
        {
            "failure.remote_error.present": bool(peers),
            "failure.remote_error.ranks": ranks_of(peers),
            "failure.remote_error.count": len(peers),
            "failure.remote_error.peer": next((e.data.get("peer") for e in peers if e.data.get("peer")), None),
            "failure.remote_error.peer_rank": next(
                (e.data.get("peer_rank") for e in peers if e.data.get("peer_rank") is not None), None
            ),
            "failure.remote_error.text": p.text[:300] if p else None,
            "failure.remote_error.nccl": any(e.data.get("nccl") for e in peers),
            "failure.nccl_error.codes": sorted({e.data["code"] for e in g("nccl_error") if e.data.get("code")}),
        }
    )
    gone = set(
        ranks_of(g("exit") + g("torchrun_failure") + g("torchrun_root") + g("killed") + g("oom") + g("crash"))
    ) - set(f["failure.remote_error.ranks"])
    f["failure.remote_error.exited_ranks"] = sorted(gone)
    network = bool(g("network")) or any(e.data.get("category") == "network" for e in excs)
    f["failure.remote_error.cause"] = (
        None if not peers else "process_exited" if gone else "network" if network else "unknown"
    )
    return p, peers


def rendezvous(g, f: dict) -> list:
    rz = g("rendezvous")
    z = first(rz)
    zj = next((e for e in rz if e.data.get("expected")), None)
    za = next((e for e in rz if e.data.get("addr")), None)
    f.update(
        {
            "failure.rendezvous.present": bool(rz),
            "failure.rendezvous.ranks": ranks_of(rz),
            "failure.rendezvous.joined": zj.data["joined"] if zj else None,
            "failure.rendezvous.expected": zj.data["expected"] if zj else None,
            "failure.rendezvous.addr": za.data["addr"] if za else None,
            "failure.rendezvous.port": za.data.get("port") if za else None,
            "failure.rendezvous.text": _rendezvous_text(z, rz),
        }
    )
    return rz


def torchrun(g, f: dict) -> tuple:
    """(torchrun's named root cause, its root events, the non-zero exits)."""
    roots = g("torchrun_root")
    bad_exits = [e for e in g("exit") if e.data.get("exitcode") not in (0, None)]
    r = first(roots)
    f.update(
        {
            "failure.torchrun_named_rank": r.rank if r else None,
            "failure.torchrun_exitcode": r.data.get("exitcode") if r else None,
            "failure.torchrun_signal": r.data.get("signal") if r else None,
            "failure.torchrun_failed_ranks": ranks_of(roots + g("torchrun_failure") + bad_exits),
        }
    )
    return r, roots, bad_exits


def stopped(g, f: dict, known: set, waiting: list, own_fail: set, last_step: dict, any_wait: bool) -> int | None:
    """The rank that stopped issuing collectives while others waited (None when no rank did)."""
    out: list[int] = []
    if waiting:
        # ranks are numbered from 0: when every rank up to the highest one seen reported the timeout except
        # exactly one, and the log shows progress lines that carry no rank (that rank's own output, e.g. an
        # unprefixed progress bar), that rank was busy elsewhere and did not reach the collective. (An
        # excerpt with gaps, or a log of one rank, says nothing about the ranks it does not show.)
        absent = set(range(max(waiting) + 1)) - set(waiting) - known
        unnamed_progress = any(e.rank is None for e in g("progress"))
        everyone = known | (absent if len(absent) == 1 and len(set(waiting)) >= 2 and unnamed_progress else set())
        out = sorted(everyone - set(waiting) - own_fail)
    if len(last_step) > 1 and any_wait:
        top = max(last_step.values())
        out = sorted(
            set(out) | {rk for rk, s in last_step.items() if s < top and rk not in own_fail and rk not in waiting}
        )
    mb_ranks = sorted({r for e in g("monitored_barrier") for r in e.data.get("stuck_ranks", [])} - own_fail)
    if mb_ranks:  # monitoredBarrier names the ranks that never arrived
        out = mb_ranks + [r for r in out if r not in mb_ranks]
        waiting = sorted(set(waiting) | set(ranks_of(g("monitored_barrier"))))
    st = out[0] if out else None
    f.update(
        {
            "failure.stopped.ranks": out,
            "failure.stopped.rank": st,
            "failure.stopped.last_step": last_step.get(st) if st is not None else None,
            "failure.stopped.waiting_ranks": waiting,
        }
    )
    return st


def flight_recorder(f: dict, fr: dict) -> None:
    f["failure.flight_recorder.present"] = bool(fr.get("present"))
    for key in (
        "ranks",
        "missing_ranks",
        "behind_rank",
        "behind_by",
        "last_seq",
        "last_completed",
        "stuck",
        "mismatch",
    ):
        f[f"failure.flight_recorder.{key}"] = fr.get(key)
    frm = fr.get("mismatch") or {}
    f["failure.flight_recorder.mismatch_seq"] = frm.get("seq")
    f["failure.flight_recorder.mismatch_ranks"] = frm.get("odd_ranks") or []
    f["failure.flight_recorder.mismatch_aspects"] = frm.get("aspects") or []


def _rendezvous_text(z, rz) -> str | None:
    """The first store/rendezvous line; when the port-in-use detail is on another line (libuv's split
    `port: 29500 … name: EADDRINUSE, message: address already in use`), it is appended, so the text says why."""
    if z is None:
        return None
    text = z.text
    if not ADDRESS_IN_USE.search(text):
        other = next((e for e in rz if ADDRESS_IN_USE.search(e.text)), None)
        if other is not None:
            text = f"{text} ({other.text.strip()})"
    return text[:300]


def _same_error(a: LogEvent, b: LogEvent) -> bool:
    norm = lambda e: (e.data.get("exc_type"), _DIGITS.sub("N", str(e.data.get("message") or "")))  # noqa: E731
    return norm(a) == norm(b)


def _int(v) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None
