"""Events → one flat dict of facts (``failure.*``), ordered by causality.

The root cause is chosen in this order (the first that applies):
  1. a CUDA OOM (earliest)                       kind "oom"
  2. a rank killed by a signal other than the launcher's SIGTERM, or a native crash
                                                 kind "killed" / "crash"
  2a. a bootstrap/interface/transport fault (a missing interface, no interface in the peer's subnet, bind
      failed, an IB completion error, P2P IPC failures)                            kind "network"
  2b. the job could not assemble (store/rendezvous timeout, a rank never joined)   kind "rendezvous"
      (then a connect failure during bootstrap: "network"; an argparse/click usage error: "exit")
  3. a Python error on a rank that is not itself a collective symptom
                                                 kind "exception"
  4. TORCH_DISTRIBUTED_DEBUG=DETAIL mismatch     kind "mismatch"
  5. a rank that stopped issuing collectives while others waited   kind "stopped"
  6. ranks timed out at different sequence numbers (the lowest is behind)   kind "seq_behind"
  7. Flight Recorder: a rank behind or a mismatched collective     kind "flight_recorder"
  8. a watchdog / gloo timeout                   kind "timeout"
  9. a peer closed the connection / ncclRemoteError                kind "remote_error"
 10. a non-zero exit reported by torchrun or events.jsonl   kind "exit"
When every rank fails alike (the same error, exit code or bootstrap fault) the root-cause rank is None:
the cause is shared configuration.  analyze.py then refines: a suspected P2P hang or a wrong NCCL interface
becomes "network" (failfacts.py), a rank the stack dumps show busy while others waited becomes "busy" (hang.py).
Everything on the other ranks is then a symptom.
"""

from __future__ import annotations

import time as _time
import re
from collections import Counter
from dataclasses import dataclass, field

from ..resources import metric_params
from .catalogue import message_by_id
from .failfacts import exit_facts, network_facts
from .model import LogEvent

LAUNCHER_SIGNALS = {"SIGTERM", "SIGINT", "SIGHUP"}
_DIGITS = re.compile(r"\d+")


def time_str(t: float | None) -> str:
    if t is None:
        return "an unlogged time"
    return _time.strftime("%Y-%m-%d %H:%M:%S", _time.gmtime(t)) + " UTC"


def _first(evs: list[LogEvent]) -> LogEvent | None:
    """Earliest event: by time where both are known, else by position (events come in file order)."""
    if not evs:
        return None
    timed = [e for e in evs if e.time is not None]
    return min(timed, key=lambda e: e.time) if timed else evs[0]


def _ranks(evs) -> list[int]:
    return sorted({e.rank for e in evs if e.rank is not None})


def failure_facts(events: list[LogEvent], fr: dict | None, world_size: int | None,
                  message: LogEvent | None = None) -> dict:
    """``message``: the first line of a cause-role catalogue message (messages.cause_event), evidence of its own."""
    by = {}
    for e in events:
        by.setdefault(e.kind, []).append(e)
    g = lambda k: by.get(k, [])  # noqa: E731
    f: dict = {}
    known = {e.rank for e in events if e.rank is not None}

    # ------------------------------------------------------------------ progress
    last_step: dict[int, int] = {}
    for e in g("progress"):
        if e.rank is not None:
            last_step[e.rank] = max(e.data["step"], last_step.get(e.rank, -1))
    f["failure.progress.last_step"] = {str(r): s for r, s in sorted(last_step.items())}
    f["failure.progress.max_step"] = max(last_step.values()) if last_step else None

    # ------------------------------------------------------------------ OOM
    ooms = [e for e in g("oom")]
    o = _first([e for e in ooms if e.rank is not None]) or _first(ooms)
    f.update({"failure.oom.present": bool(ooms), "failure.oom.ranks": _ranks(ooms),
              "failure.oom.first_rank": o.rank if o else None,
              "failure.oom.gpus": sorted({e.data["gpu"] for e in ooms if e.data.get("gpu") is not None}), "failure.oom.first_time": o.time if o else None,
              "failure.oom.tried": o.data.get("tried") if o else None, "failure.oom.text": o.text[:300] if o else None})
    # the script caught the first OOM and went on: its rank logged a step after it (a rank that skips a batch
    # runs one collective fewer than its peers, which then wait for it); None when no step times are logged
    later = [e for e in g("progress") if o is not None and e.rank == o.rank and e.time is not None]
    f["failure.oom.caught"] = (None if o is None or o.rank is None or o.time is None or not later
                               else any(e.time > o.time for e in later))

    # ------------------------------------------------------------------ signals, crashes, exits
    # ranks that were waiting in a collective: their SIGABRT is the watchdog's tear-down, not a cause
    waited = {e.rank for e in g("nccl_timeout") + g("gloo_timeout") + g("work_state") + g("peer_error") + g("stuck")
              + g("nccl_error") + [x for x in g("exception") if x.data.get("category") in ("timeout", "peer")]}
    # (once any rank waited in a collective, every SIGABRT is taken as that tear-down)
    teardown = [e for e in g("killed") if e.data.get("signal") == "SIGABRT" and waited]
    kills = [e for e in g("killed") if e.data.get("signal") not in LAUNCHER_SIGNALS and e not in teardown]
    term = [e for e in g("killed") if e.data.get("signal") in LAUNCHER_SIGNALS or e in teardown]
    k = _first([e for e in kills if e.rank is not None and e.data.get("root")]) or \
        _first([e for e in kills if e.rank is not None]) or _first(kills)
    f.update({"failure.killed.present": bool(kills), "failure.killed.ranks": _ranks(kills),
              "failure.killed.rank": k.rank if k else None, "failure.killed.signal": k.data.get("signal") if k else None,
              "failure.killed.exitcode": k.data.get("exitcode") if k else None,
              "failure.killed.terminated_ranks": _ranks(term),
              "failure.killed.host_oom": any(e.data.get("host_oom") for e in kills)})
    crashes = g("crash")
    f["failure.crash.ranks"] = _ranks(crashes)

    # ------------------------------------------------------------------ exceptions
    excs = g("exception")
    own_any = [e for e in excs if e.data.get("category") == "other"
               and not any(w in e.text for w in ("clients joined", "workers joined", "socket has", "Rendezvous",
                                                 "store based", "DistStoreError"))
               and "ChildFailedError" not in (e.data.get("exc_type") or "")]
    own_exc = [e for e in own_any if e.rank is not None]
    if not own_exc and not known:          # a single pasted log without rank marks: its error still counts
        own_exc = [e for e in own_any if e.data.get("source") != "error.json"]
    x = _first(own_exc)
    f.update({"failure.exception.ranks": _ranks(excs), "failure.exception.own_ranks": _ranks(own_exc),
              "failure.exception.first_rank": x.rank if x else None,
              "failure.exception.type": x.data.get("exc_type") if x else None,
              "failure.exception.message": (x.data.get("message") or "")[:300] if x else None})
    # every rank raised the same error (rank numbers aside): a shared cause, not one rank with symptoms elsewhere
    same = {r for r in _ranks(own_exc)
            if x is not None and any(e.rank == r and _same_error(e, x) for e in own_exc)}
    f["failure.exception.shared"] = bool(x is not None and len(same) >= 2
                                         and same >= (set(range(world_size)) if world_size else known))

    # ------------------------------------------------------------------ timeouts
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
    t0 = _first(nto) or _first(tos)
    ops = Counter(e.data.get("op") for e in nto if e.data.get("op"))
    waiting = _ranks(tos + g("work_state") + g("dump_signal") + g("peer_error") + g("stuck") + teardown
                     + [e for e in excs if e.data.get("category") == "peer"])
    f.update({
        "failure.timeout.present": bool(tos), "failure.timeout.ranks": _ranks(tos),
        "failure.timeout.backend": "nccl" if nto else ("gloo" if tos else None),
        "failure.timeout.op": ops.most_common(1)[0][0] if ops else (t0.data.get("op") if t0 else None),
        "failure.timeout.seq": min(seq_by_rank.values()) if seq_by_rank else (t0.data.get("seq") if t0 else None),
        "failure.timeout.seq_by_rank": {str(r): s for r, s in sorted(seq_by_rank.items())},
        "failure.timeout.op_by_rank": {str(r): s for r, s in sorted(op_by_rank.items())},
        "failure.timeout.seqs": sorted({e.data["seq"] for e in nto if "seq" in e.data}),
        "failure.timeout.timeout_ms": next((e.data.get("timeout_ms") for e in tos if e.data.get("timeout_ms")), None),
        "failure.timeout.ran_ms": max((e.data.get("ran_ms", 0) for e in nto), default=None) or None,
        "failure.timeout.numel": next((e.data.get("numel_in") for e in nto if e.data.get("numel_in")), None),
        "failure.timeout.pg": main_pg if main_pg is not None else (0 if nto else None),
        "failure.timeout.last_enqueued": {str(e.rank): e.data["enqueued"] for e in states},
        "failure.timeout.last_completed": {str(e.rank): e.data["completed"] for e in states},
        "failure.timeout.enqueued_ahead": max((e.data["enqueued"] - e.data["at"] for e in states), default=None),
        "failure.timeout.first_rank": t0.rank if t0 else None,
        "failure.timeout.first_time": t0.time if t0 else None,
        "failure.timeout.dump_from_rank": next((e.data.get("from_rank") for e in g("dump_signal")
                                                 if e.data.get("from_rank") is not None), None),
        "failure.timeout.silent_ranks": (sorted(set(range(world_size)) - set(waiting))
                                         if world_size and waiting else []),
    })
    f["failure.timeout.timeout_s"] = (f["failure.timeout.timeout_ms"] / 1000.0
                                      if f["failure.timeout.timeout_ms"] else None)

    # ------------------------------------------------------------------ sequence skew
    f.update({"failure.seq_behind.rank": None, "failure.seq_behind.by": None, "failure.seq_behind.seq": None,
              "failure.seq_behind.max_seq": None, "failure.seq_behind.ranks": []})
    if len(seq_by_rank) > 1 and max(seq_by_rank.values()) > min(seq_by_rank.values()):
        low = min(seq_by_rank.values())
        behind = sorted(r for r, s in seq_by_rank.items() if s == low)
        f.update({"failure.seq_behind.rank": behind[0], "failure.seq_behind.ranks": behind,
                  "failure.seq_behind.seq": low, "failure.seq_behind.max_seq": max(seq_by_rank.values()),
                  "failure.seq_behind.by": max(seq_by_rank.values()) - low})

    # ------------------------------------------------------------------ mismatch
    mm = g("mismatch")
    m = _first(mm)
    f["failure.mismatch.present"] = bool(mm)
    for key in ("rank_a", "rank_b", "op_a", "op_b", "seq_a", "seq_b", "shape_a", "shape_b", "dtype_a", "dtype_b",
                "behind_rank", "text"):
        f[f"failure.mismatch.{key}"] = None
    f["failure.mismatch.ranks"], f["failure.mismatch.aspects"] = [], []
    if m:
        a, b = m.data.get("a") or {}, m.data.get("b") or {}
        ra, rb = m.data.get("rank_a"), m.data.get("rank_b")
        if rb is None and a:
            # the older form: each rank reports only its own fingerprint ("Rank 0 is running inconsistent
            # collective: …", then the same line from rank 1): pair it with another rank's report
            other = next((e for e in mm if e.data.get("rank_b") is None and e.data.get("a")
                          and e.data.get("rank_a") not in (None, ra)), None)
            if other is not None:
                rb, b = other.data["rank_a"], other.data["a"]
        sa, sb = _int(a.get("SequenceNumber")), _int(b.get("SequenceNumber"))
        aspects = [n for n, key in (("op", "OpType"), ("sequence", "SequenceNumber"),
                                    ("shape", "TensorShape"), ("dtype", "TensorDtypes"))
                   if key in a and key in b and a.get(key) != b.get(key)]
        if m.data.get("aspect") and m.data["aspect"] not in aspects:
            aspects.append(m.data["aspect"])
        behind = (ra if sa < sb else rb) if sa is not None and sb is not None and sa != sb else (rb if rb is not None else ra)
        f.update({"failure.mismatch.rank_a": ra, "failure.mismatch.rank_b": rb,
                  "failure.mismatch.ranks": sorted({r for r in (ra, rb) if r is not None}),
                  "failure.mismatch.op_a": a.get("OpType"), "failure.mismatch.op_b": b.get("OpType"),
                  "failure.mismatch.seq_a": sa, "failure.mismatch.seq_b": sb,
                  "failure.mismatch.shape_a": a.get("TensorShape"), "failure.mismatch.shape_b": b.get("TensorShape"),
                  "failure.mismatch.dtype_a": a.get("TensorDtypes"), "failure.mismatch.dtype_b": b.get("TensorDtypes"),
                  "failure.mismatch.aspects": aspects, "failure.mismatch.behind_rank": behind,
                  "failure.mismatch.text": m.text[:400]})

    # ------------------------------------------------------------------ remote errors
    peers = g("peer_error") + [e for e in excs if e.data.get("category") == "peer"]
    p = _first(peers)
    f.update({"failure.remote_error.present": bool(peers), "failure.remote_error.ranks": _ranks(peers),
              "failure.remote_error.count": len(peers),
              "failure.remote_error.peer": next((e.data.get("peer") for e in peers if e.data.get("peer")), None),
              "failure.remote_error.peer_rank": next((e.data.get("peer_rank") for e in peers
                                                      if e.data.get("peer_rank") is not None), None),
              "failure.remote_error.text": p.text[:300] if p else None,
              "failure.remote_error.nccl": any(e.data.get("nccl") for e in peers),
              "failure.nccl_error.codes": sorted({e.data["code"] for e in g("nccl_error") if e.data.get("code")})})
    # did the peer's process end, or did the network drop the connection?
    gone = set(_ranks(g("exit") + g("torchrun_failure") + g("torchrun_root") + g("killed") + g("oom") + g("crash"))) \
        - set(f["failure.remote_error.ranks"])
    f["failure.remote_error.exited_ranks"] = sorted(gone)
    f["failure.remote_error.cause"] = (None if not peers else "process_exited" if gone else
                                       "network" if (g("network") or any(e.data.get("category") == "network" for e in excs))
                                       else "unknown")

    # ------------------------------------------------------------------ rendezvous / store
    rz = g("rendezvous")
    z = _first(rz)
    zj = next((e for e in rz if e.data.get("expected")), None)
    za = next((e for e in rz if e.data.get("addr")), None)
    f.update({"failure.rendezvous.present": bool(rz), "failure.rendezvous.ranks": _ranks(rz),
              "failure.rendezvous.joined": zj.data["joined"] if zj else None,
              "failure.rendezvous.expected": zj.data["expected"] if zj else None,
              "failure.rendezvous.addr": za.data["addr"] if za else None,
              "failure.rendezvous.port": za.data.get("port") if za else None,
              "failure.rendezvous.text": _rendezvous_text(z, rz)})

    # ------------------------------------------------------------------ torchrun
    roots = g("torchrun_root")
    bad_exits = [e for e in g("exit") if e.data.get("exitcode") not in (0, None)]
    r = _first(roots)
    f.update({"failure.torchrun_named_rank": r.rank if r else None,
              "failure.torchrun_exitcode": r.data.get("exitcode") if r else None,
              "failure.torchrun_signal": r.data.get("signal") if r else None,
              "failure.torchrun_failed_ranks": _ranks(roots + g("torchrun_failure") + bad_exits)})

    # ------------------------------------------------------------------ stopped ranks
    own_fail = set(_ranks(ooms + kills + crashes + own_exc + mm))
    stopped: list[int] = []
    if waiting:
        # ranks are numbered from 0: when every rank up to the highest one seen reported the timeout except
        # exactly one, and the log shows progress lines that carry no rank (that rank's own output, e.g. an
        # unprefixed progress bar), that rank was busy elsewhere and did not reach the collective. (An
        # excerpt with gaps, or a log of one rank, says nothing about the ranks it does not show.)
        absent = set(range(max(waiting) + 1)) - set(waiting) - known
        unnamed_progress = any(e.rank is None for e in g("progress"))
        everyone = known | (absent if len(absent) == 1 and len(set(waiting)) >= 2 and unnamed_progress else set())
        stopped = sorted(everyone - set(waiting) - own_fail)
    if len(last_step) > 1 and (tos or peers):
        top = max(last_step.values())
        stopped = sorted(set(stopped) | {rk for rk, s in last_step.items() if s < top and rk not in own_fail
                                         and rk not in waiting})
    mb_ranks = sorted({r for e in g("monitored_barrier") for r in e.data.get("stuck_ranks", [])} - own_fail)
    if mb_ranks:                           # monitoredBarrier names the ranks that never arrived
        stopped = mb_ranks + [r for r in stopped if r not in mb_ranks]
        waiting = sorted(set(waiting) | set(_ranks(g("monitored_barrier"))))
    st = stopped[0] if stopped else None
    f.update({"failure.stopped.ranks": stopped, "failure.stopped.rank": st,
              "failure.stopped.last_step": last_step.get(st) if st is not None else None,
              "failure.stopped.waiting_ranks": waiting})

    # ------------------------------------------------------------------ flight recorder
    fr = fr or {}
    f["failure.flight_recorder.present"] = bool(fr.get("present"))
    for key in ("ranks", "missing_ranks", "behind_rank", "behind_by", "last_seq", "last_completed", "stuck",
                "mismatch"):
        f[f"failure.flight_recorder.{key}"] = fr.get(key)
    frm = fr.get("mismatch") or {}
    f["failure.flight_recorder.mismatch_seq"] = frm.get("seq")
    f["failure.flight_recorder.mismatch_ranks"] = frm.get("odd_ranks") or []
    f["failure.flight_recorder.mismatch_aspects"] = frm.get("aspects") or []

    # ------------------------------------------------------------------ network / bootstrap, exits, usage errors
    nets = g("network") + [e for e in excs if e.data.get("category") == "network"]
    f.update(network_facts(nets, g("net_setting"), world_size, known))
    nw = _first(g("network")) or _first(nets)
    f.update(exit_facts(g("exit"), g("usage_error"), known))

    # ------------------------------------------------------------------ root cause
    root = root_cause(RootEvidence(f, oom=o, killed=k, crashes=crashes, rendezvous=rz, exception=x, mismatch=m,
                                   stopped_rank=st, first_timeout=t0, peer_error=p, torchrun_root=r,
                                   flight_recorder=fr, network=nw, exits=g("exit"), usage=g("usage_error"),
                                   message=message))
    kind, rank, ev = root
    f["failure.root_cause.kind"] = kind
    f["failure.root_cause.rank"] = rank
    f["failure.root_cause.time"] = ev.time if ev else None
    f["failure.root_cause.time_str"] = time_str(ev.time if ev else None)
    f["failure.root_cause.text"] = ev.text[:400] if ev else None
    f["failure.root_cause.file"] = ev.file if ev else None
    f["failure.root_cause.line_no"] = ev.line_no if ev else None
    f["failure.root_cause.step"] = _step_before(g("progress"), ev, rank, kind) if rank is not None else None
    f["failure.root_cause.message_kind"] = ev.data.get("cause_kind") if kind == "message" and ev else None
    failing = set(_ranks(rz + ooms + kills + crashes + excs + tos + peers + mm + g("work_state") + term + roots
                         + g("torchrun_failure") + bad_exits + g("nccl_error") + g("stuck")
                         + ([message] if kind == "message" else [])))
    f["failure.ranks"] = sorted(failing)
    f["failure.symptom_ranks"] = sorted(failing - {rank}) if rank is not None else sorted(failing)
    f["failure.present"] = kind is not None
    named = f["failure.torchrun_named_rank"]
    f["failure.torchrun_misleading"] = bool(named is not None and rank is not None and named != rank)
    return f


_IN_USE = re.compile(r"already in use|EADDRINUSE|errno:? ?98\b", re.I)


def _rendezvous_text(z, rz) -> str | None:
    """The first store/rendezvous line; when the port-in-use detail is on another line (libuv's split
    `port: 29500 … name: EADDRINUSE, message: address already in use`), it is appended, so the text says why."""
    if z is None:
        return None
    text = z.text
    if not _IN_USE.search(text):
        other = next((e for e in rz if _IN_USE.search(e.text)), None)
        if other is not None:
            text = f"{text} ({other.text.strip()})"
    return text[:300]


def _step_before(progress: list[LogEvent], ev: LogEvent | None, rank: int, kind: str | None) -> int | None:
    """The last step the rank logged before the root-cause line: by time when both carry one, else by
    line order in the same file (not in a torchrun console copy, whose stdout/stderr order is not
    reliable); for a rank that ended there (killed, crashed, stopped) its last step.  Else None."""
    mine = [e for e in progress if e.rank == rank]
    if ev is not None and mine:
        if ev.time is not None and not ev.data.get("time_inferred") and all(e.time is not None for e in mine):
            before = [e.data["step"] for e in mine if e.time <= ev.time]
            return max(before) if before else None
        if "local_rank" not in ev.data:
            same = [e.data["step"] for e in mine if e.file == ev.file and "local_rank" not in e.data]
            if same:
                before = [e.data["step"] for e in mine if e.file == ev.file and e.line_no < ev.line_no]
                return max(before) if before else None
    if kind in ("killed", "crash", "stopped") and mine:
        return max(e.data["step"] for e in mine)
    return None


def _same_error(a: LogEvent, b: LogEvent) -> bool:
    norm = lambda e: (e.data.get("exc_type"), _DIGITS.sub("N", str(e.data.get("message") or "")))  # noqa: E731
    return norm(a) == norm(b)


def _int(v) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


@dataclass
class RootEvidence:
    """What the logs hold for each kind of root cause; ``root_cause`` picks one by the order in
    rules/metrics.toml [failures] root_cause_priority."""
    facts: dict
    oom: LogEvent | None = None
    killed: LogEvent | None = None
    crashes: list = field(default_factory=list)
    rendezvous: list = field(default_factory=list)
    exception: LogEvent | None = None
    mismatch: LogEvent | None = None
    stopped_rank: int | None = None
    first_timeout: LogEvent | None = None
    peer_error: LogEvent | None = None
    torchrun_root: LogEvent | None = None
    flight_recorder: dict = field(default_factory=dict)
    network: LogEvent | None = None
    exits: list = field(default_factory=list)
    usage: list = field(default_factory=list)
    message: LogEvent | None = None


def _others(e: RootEvidence) -> list[LogEvent]:
    """The events of every other kind of evidence."""
    one = [e.oom, e.killed, e.exception, e.mismatch, e.first_timeout, e.peer_error, e.torchrun_root, e.network]
    return [x for x in one if x is not None] + list(e.crashes) + list(e.rendezvous) + list(e.exits) + list(e.usage)


def _message(e: RootEvidence):
    """A cause-role catalogue message is a failure on its own, unless its line is another kind's evidence
    (a traceback's last line, a network fault): that kind's rule then shows the catalogue's cause and fix."""
    if e.message is None:
        return None
    msg = message_by_id(e.message.data["id"])
    if msg is not None and any(msg.match(x.text) for x in _others(e)):
        return None
    return "message", e.message.rank, e.message


def _own(e: RootEvidence, shared: str, ev: LogEvent):
    return None if e.facts[shared] else ev.rank


def _network(e: RootEvidence, specific: bool):
    if e.network is None:
        return None
    vague = e.facts["failure.network.problem"] in (None, *metric_params()["failures"]["vague_network"])
    if specific and vague:
        return None
    return "network", _own(e, "failure.network.shared", e.network), e.network


def _flight_recorder(e: RootEvidence):
    fr = e.flight_recorder
    if not (fr.get("mismatch") or fr.get("behind_rank") is not None or fr.get("missing_ranks")):
        return None
    mm = fr.get("mismatch") or {}
    rk = (mm.get("odd_ranks") or [None])[0] if mm else fr.get("behind_rank")
    if rk is None and fr.get("missing_ranks"):
        rk = fr["missing_ranks"][0]
    return "flight_recorder", rk, None


def _timeout(e: RootEvidence):
    if e.first_timeout is None:
        return None
    ranks, first = e.facts["failure.timeout.ranks"], e.facts["failure.timeout.dump_from_rank"]
    return "timeout", first if first is not None else (ranks[0] if len(ranks) == 1 else None), e.first_timeout


def _exit(e: RootEvidence):
    bad = _first([x for x in e.exits if (x.data.get("exitcode") or 0) != 0])
    return None if bad is None else ("exit", _own(e, "failure.exit.shared", bad), bad)


def _one(kind: str, ev: LogEvent | None, rank=None):
    return None if ev is None else (kind, ev.rank if rank is None else rank, ev)


# kind -> (evidence -> (kind, rank, event) or None); the order they are tried is data (metrics.toml)
ROOT_EVIDENCE = {
    "oom": lambda e: _one("oom", e.oom),
    "known_message": _message,
    "killed": lambda e: _one("killed", e.killed),
    "crash": lambda e: _one("crash", _first(e.crashes)),
    "network_fault": lambda e: _network(e, specific=True),
    "rendezvous": lambda e: _one("rendezvous", _first(e.rendezvous)),
    "network": lambda e: _network(e, specific=False),
    "usage_exit": lambda e: (lambda u: None if u is None else ("exit", _own(e, "failure.exit.shared", u), u))(
        _first(list(e.usage))),
    "exception": lambda e: None if e.exception is None else (
        "exception", _own(e, "failure.exception.shared", e.exception), e.exception),
    "mismatch": lambda e: None if e.mismatch is None else (
        "mismatch", e.facts["failure.mismatch.behind_rank"], e.mismatch),
    "stopped": lambda e: None if e.stopped_rank is None else (
        "stopped", e.stopped_rank, e.first_timeout or e.peer_error),
    "seq_behind": lambda e: None if e.facts["failure.seq_behind.rank"] is None else (
        "seq_behind", e.facts["failure.seq_behind.rank"], e.first_timeout),
    "flight_recorder": _flight_recorder,
    "timeout": _timeout,
    # the culprit is the peer, not the rank that logged the error (failure.remote_error.peer hints at it)
    "remote_error": lambda e: None if e.peer_error is None else ("remote_error", None, e.peer_error),
    "torchrun_exit": lambda e: None if e.torchrun_root is None or not (e.torchrun_root.data.get("exitcode") or 0)
    else ("exit", e.torchrun_root.rank, e.torchrun_root),
    "exit": _exit,
}


# evidence entries whose name is not the kind they report
_REPORTED_AS = {"known_message": "message", "network_fault": "network", "usage_exit": "exit", "torchrun_exit": "exit"}


def root_cause_kinds() -> set[str]:
    """Every failure.root_cause.kind the evidence table can report (each needs a rule)."""
    return {_REPORTED_AS.get(k, k) for k in ROOT_EVIDENCE}


def root_cause(e: RootEvidence) -> tuple:
    """(kind, rank, event) of the first kind in the configured priority that has evidence."""
    for kind in metric_params()["failures"]["root_cause_priority"]:
        found = ROOT_EVIDENCE[kind](e)
        if found is not None:
            return found
    return None, None, None
