"""Events → one flat dict of facts (``failure.*``), ordered by causality.

The root cause is chosen in this order (the first that applies):
  0. a death the launcher reports on ranks whose own record (events.jsonl) says their program had ended with
     exit code 0, and no other failure anywhere: the interpreter's teardown   kind "teardown"
  1. a CUDA OOM (earliest)                       kind "oom"
  2. a rank killed by a signal other than the launcher's SIGTERM, or a native crash
                                                 kind "killed" / "crash"
     (a SIGABRT once a rank waited in a collective, or an abort that follows the same rank's own timeout, is
     ProcessGroupNCCL's watchdog tearing the process down: failure_sections.kills counts it as tear-down)
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
from dataclasses import dataclass, field

from ..resources import metric_defaults
from . import failure_sections as S
from .catalogue import message_by_id
from .failfacts import exit_facts, network_facts
from .model import LogEvent

_first = S.first


def time_str(t: float | None) -> str:
    if t is None:
        return "an unlogged time"
    return _time.strftime("%Y-%m-%d %H:%M:%S", _time.gmtime(t)) + " UTC"


def failure_facts(
    events: list[LogEvent],
    fr: dict | None,
    world_size: int | None,
    message: LogEvent | None = None,
    thresholds: dict | None = None,
) -> dict:
    """``message``: the first line of a cause-role catalogue message (messages.cause_event), evidence of its own;
    ``thresholds``: the analysis's rules/metrics.toml (its [failures] table orders the root causes)."""
    by: dict[str, list] = {}
    for e in events:
        by.setdefault(e.kind, []).append(e)
    g = lambda k: by.get(k, [])  # noqa: E731
    f: dict = {}
    known = {e.rank for e in events if e.rank is not None}

    last_step = S.progress(g, f)
    o = S.oom(g, f)
    k, kills, term, teardown, crashes = S.kills(g, f)
    x, excs, own_exc = S.exceptions(g, f, known, world_size)
    t0, tos, waiting, seq_by_rank = S.timeouts(g, f, excs, teardown, world_size)
    S.seq_behind(f, seq_by_rank)
    m = S.mismatch(g, f)
    p, peers = S.remote_errors(g, f, excs)
    rz = S.rendezvous(g, f)
    r, roots, bad_exits = S.torchrun(g, f)
    own_fail = set(S.ranks_of(g("oom") + kills + crashes + own_exc + g("mismatch")))
    st = S.stopped(g, f, known, waiting, own_fail, last_step, bool(tos or peers))
    fr = fr or {}
    S.flight_recorder(f, fr)

    # ------------------------------------------------------------------ network / bootstrap, exits, usage errors
    nets = g("network") + [e for e in excs if e.data.get("category") == "network"]
    f.update(network_facts(nets, g("net_setting"), world_size, known))
    nw = S.first(g("network")) or S.first(nets)
    f.update(exit_facts(g("exit"), g("usage_error"), known))
    # SIGKILL on every rank the logs know of, two or more: a stop from outside (a scheduler's kill -9, a container's
    # memory group), not one rank's death the others followed (one known process SIGKILLed is the OOM killer's
    # usual victim: acumen-4's spawn log)
    killed_ranks = set(S.ranks_of(kills))
    f["failure.killed.every_rank"] = (
        len(killed_ranks) >= 2
        and killed_ranks >= known
        and (world_size is None or len(killed_ranks) >= world_size)
        and all(e.data.get("signal") == "SIGKILL" for e in kills)
    )
    ended = program_ends(g("exit"))
    f["failure.teardown.ended_ranks"] = sorted(ended)

    # ------------------------------------------------------------------ root cause
    root = root_cause(
        RootEvidence(
            f,
            failure_params=(thresholds or metric_defaults())["failures"],
            oom=o,
            killed=k,
            crashes=crashes,
            rendezvous=rz,
            exception=x,
            mismatch=m,
            stopped_rank=st,
            first_timeout=t0,
            peer_error=p,
            torchrun_root=r,
            flight_recorder=fr,
            network=nw,
            exits=g("exit"),
            usage=g("usage_error"),
            message=message,
            program_ended=ended,
            stuck=g("stuck"),
        )
    )
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
    failing = set(
        S.ranks_of(
            rz
            + g("oom")
            + kills
            + crashes
            + excs
            + tos
            + peers
            + g("mismatch")
            + g("work_state")
            + term
            + roots
            + g("torchrun_failure")
            + bad_exits
            + g("nccl_error")
            + g("stuck")
            + ([message] if kind == "message" else [])
        )
    )
    f["failure.ranks"] = sorted(failing)
    f["failure.symptom_ranks"] = sorted(failing - {rank}) if rank is not None else sorted(failing)
    f["failure.present"] = kind is not None
    named = f["failure.torchrun_named_rank"]
    f["failure.torchrun_misleading"] = bool(named is not None and rank is not None and named != rank)
    return f


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


@dataclass
class RootEvidence:
    """What the logs hold for each kind of root cause; ``root_cause`` picks one by the order in
    rules/metrics.toml [failures] root_cause_priority."""

    facts: dict
    failure_params: dict = field(default_factory=lambda: metric_defaults()["failures"])  # metrics.toml [failures]
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
    program_ended: set = field(default_factory=set)
    stuck: list = field(default_factory=list)


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
    vague = e.facts["failure.network.problem"] in (None, *e.failure_params["vague_network"])
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


def program_ends(exits: list[LogEvent]) -> set[int]:
    """Ranks whose own record (ddpdoctor's events.jsonl, written by the rank at its exit) says their program
    ended with exit code 0: the end of the script, ``sys.exit(0)``, or the end of the recorded window."""
    return {
        x.rank
        for x in exits
        if x.rank is not None and x.data.get("source") == "events.jsonl" and x.data.get("exitcode") == 0
    }


def _teardown(e: RootEvidence):
    """A rank the launcher (or its log) reports dead, killed or crashed after its own record said its program
    had ended with exit code 0, while nothing else failed anywhere (no error, timeout, OOM, waiting rank):
    the process died in the interpreter's teardown (torch's C++ objects destroyed after Python's; a process
    group the script never destroyed, pytorch/pytorch#190489), not in the training."""
    others = (e.oom, e.exception, e.mismatch, e.first_timeout, e.peer_error, e.network, e.message)
    if not e.program_ended or any(x is not None for x in others) or e.rendezvous or e.usage or e.stuck:
        return None
    if e.stopped_rank is not None:  # a rank others waited for: not the end of a finished program
        return None
    deaths = [x for x in (e.killed, e.torchrun_root) if x is not None] + list(e.crashes)
    deaths += [x for x in e.exits if (x.data.get("exitcode") or 0) != 0]
    if not deaths or any(x.rank is None or x.rank not in e.program_ended for x in deaths):
        return None
    first = e.killed or _first(list(e.crashes)) or e.torchrun_root or _first(deaths)
    return "teardown", first.rank, first


def _one(kind: str, ev: LogEvent | None, rank=None):
    return None if ev is None else (kind, ev.rank if rank is None else rank, ev)


# kind -> (evidence -> (kind, rank, event) or None); the order they are tried is data (metrics.toml)
ROOT_EVIDENCE = {
    "teardown": _teardown,
    "oom": lambda e: _one("oom", e.oom),
    "known_message": _message,
    "killed": lambda e: _one("killed", e.killed),
    "crash": lambda e: _one("crash", _first(e.crashes)),
    "network_fault": lambda e: _network(e, specific=True),
    "rendezvous": lambda e: _one("rendezvous", _first(e.rendezvous)),
    "network": lambda e: _network(e, specific=False),
    "usage_exit": lambda e: (lambda u: None if u is None else ("exit", _own(e, "failure.exit.shared", u), u))(
        _first(list(e.usage))
    ),
    "exception": lambda e: (
        None if e.exception is None else ("exception", _own(e, "failure.exception.shared", e.exception), e.exception)
    ),
    "mismatch": lambda e: (
        None if e.mismatch is None else ("mismatch", e.facts["failure.mismatch.behind_rank"], e.mismatch)
    ),
    "stopped": lambda e: (
        None if e.stopped_rank is None else ("stopped", e.stopped_rank, e.first_timeout or e.peer_error)
    ),
    "seq_behind": lambda e: (
        None
        if e.facts["failure.seq_behind.rank"] is None
        else ("seq_behind", e.facts["failure.seq_behind.rank"], e.first_timeout)
    ),
    "flight_recorder": _flight_recorder,
    "timeout": _timeout,
    # the culprit is the peer, not the rank that logged the error (failure.remote_error.peer hints at it)
    "remote_error": lambda e: None if e.peer_error is None else ("remote_error", None, e.peer_error),
    "torchrun_exit": lambda e: (
        None
        if e.torchrun_root is None or not (e.torchrun_root.data.get("exitcode") or 0)
        else ("exit", e.torchrun_root.rank, e.torchrun_root)
    ),
    "exit": _exit,
}


# evidence entries whose name is not the kind they report
_REPORTED_AS = {"known_message": "message", "network_fault": "network", "usage_exit": "exit", "torchrun_exit": "exit"}


def root_cause_kinds() -> set[str]:
    """Every failure.root_cause.kind the evidence table can report (each needs a rule)."""
    return {_REPORTED_AS.get(k, k) for k in ROOT_EVIDENCE}


def root_cause(e: RootEvidence) -> tuple:
    """(kind, rank, event) of the first kind in the configured priority that has evidence."""
    for kind in e.failure_params["root_cause_priority"]:
        found = ROOT_EVIDENCE[kind](e)
        if found is not None:
            return found
    return None, None, None
