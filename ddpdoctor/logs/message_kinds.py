"""The kinds a log line (an exception's too) can be besides a Python error, one function per message family:
usage errors, interface settings, OOM, watchdog timeouts and work states, dump signals, mismatches, monitored
barriers, rendezvous/store faults, network faults, gloo timeouts, peers, NCCL errors, exits, signals, crashes,
NCCL warnings, progress.  Each family emits its event through ``emit`` (FileParser's event maker) and says
whether the line was one of its own; ``classify_message`` tries them in that order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from . import patterns as P
from .families import mismatch_text, network_problem

_RDZV_WORDS = (
    "clients joined",
    "workers joined",
    "client socket",
    "server socket",
    "already in use",
    "rendezvous",
    "store based",
    "connection refused",
    "diststoreerror",
)
_PEER_WORDS = ("peer", "pipe", "remote", "retcode 6", "aborted", "refused", "processgroupgloo", "likely closed")
_CRASH_WORDS = ("segmentation", "sig", "fatal", "core dumped", "terminate called")
_MISMATCH_WORDS = ("mismatch", "DDP expects", "verifying shape", "appears not to match")
_NAMED_NET = ("ifname_missing", "no_interface", "subnet", "p2p", "loopback", "system")


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def parse_work(args: str) -> dict:
    d = {}
    for k, v in P.WORK_ARG.findall(args):
        v = v.strip()
        key = {
            "SeqNum": "seq",
            "OpType": "op",
            "NumelIn": "numel_in",
            "NumelOut": "numel_out",
            "Timeout(ms)": "timeout_ms",
            "TensorShape": "shape",
            "DataType": "dtype",
        }[k]
        d[key] = int(v) if v.lstrip("-").isdigit() else v
    return d


@dataclass
class _Line:
    no: int
    msg: str
    ctx: dict
    nccl: bool
    exc: bool
    in_summary: bool
    low: str = field(init=False)
    loggy: bool = field(init=False)  # a line of a logger, an exception or a summary, not prose

    def __post_init__(self):
        self.low = self.msg.lower()
        self.loggy = bool(self.nccl or self.exc or self.in_summary or P.LOGGY.search(self.msg))


Emit = Callable[..., object]


def _usage_error(emit: Emit, ln: _Line) -> bool:
    if ln.exc or ln.nccl or "error" not in ln.low:
        return False
    u = P.USAGE_ERROR.match(ln.msg.strip())
    if u:
        emit("usage_error", ln.msg, ln.no, ln.ctx, prog=u.group("prog"), message=(u.group("msg") or ln.msg)[:300])
    return bool(u)


def _net_setting(emit: Emit, ln: _Line) -> bool:
    s = P.NET_IFNAME_SET.search(ln.msg) if "SOCKET_IFNAME" in ln.msg else None
    if s:
        emit("net_setting", ln.msg, ln.no, ln.ctx, var=f"{s.group(1)}_SOCKET_IFNAME", value=s.group("val"))
    return bool(s)


def _oom(emit: Emit, ln: _Line) -> bool:
    msg = ln.msg
    if not (("memory" in ln.low or "outofmemory" in ln.low) and P.OOM.search(msg) and ln.loggy):
        return False
    if P.TEARDOWN.search(msg):
        return False
    a, g = P.OOM_ALLOC.search(msg), P.OOM_GPU.search(msg)
    emit(
        "oom",
        msg,
        ln.no,
        ln.ctx,
        tried=a.group(1) if a else None,
        gpu=int(g.group(1)) if g else None,
        capacity=g.group(2) if g else None,
        source="nccl" if ln.nccl else "python",
    )
    return True


def _watchdog(emit: Emit, ln: _Line) -> bool:
    msg = ln.msg
    m = P.WATCHDOG.search(msg) if "Watchdog" in msg or "before timing out" in msg else None
    if not m:
        return False
    d = parse_work(m.group("args") or m.group("args2"))
    if m.group("ran") or m.group("ran2"):
        d["ran_ms"] = int(m.group("ran") or m.group("ran2"))
    r = P.RANK_IN_MSG.search(msg)
    if r and r.group("pg"):
        d["pg"] = int(r.group("pg"))
    d["terminated"] = bool(P.WATCHDOG_THREAD_ENDED.search(msg))
    emit("nccl_timeout", msg, ln.no, ln.ctx, **d)
    return True


def _work_state(emit: Emit, ln: _Line) -> bool:
    m = P.WORK_STATE.search(ln.msg) if "NCCL work" in ln.msg else None
    if not m:
        return False
    r = P.RANK_IN_MSG.search(ln.msg)
    emit(
        "work_state",
        ln.msg,
        ln.no,
        ln.ctx,
        at=int(m.group("at")),
        enqueued=int(m.group("enq")),
        completed=int(m.group("done")),
        pg=int(r.group("pg")) if r and r.group("pg") else None,
    )
    return True


def _dump_signal(emit: Emit, ln: _Line) -> bool:
    m = P.DUMP_SIGNAL.search(ln.msg) if "dump signal" in ln.low else None
    if m:
        sender = int(m.group("from")) if m.group("from") else ln.ctx.get("rank")
        emit("dump_signal", ln.msg, ln.no, ln.ctx, from_rank=sender)
    return bool(m)


def _mismatch(emit: Emit, ln: _Line) -> bool:
    mm = mismatch_text(ln.msg) if any(w in ln.msg for w in _MISMATCH_WORDS) else None
    if mm:
        emit("mismatch", ln.msg, ln.no, ln.ctx, **mm)
    return bool(mm)


def _monitored_barrier(emit: Emit, ln: _Line) -> bool:
    m = P.MONITORED.search(ln.msg) if "monitoredBarrier" in ln.msg else None
    if not m:
        return False
    ranks = [int(x) for x in m.group("ranks").replace(" ", "").split(",")]
    timeout_ms = int(m.group("ms")) if m.group("ms") else None
    emit("monitored_barrier", ln.msg, ln.no, ln.ctx, stuck_ranks=ranks, timeout_ms=timeout_ms)
    return True


def _rendezvous(emit: Emit, ln: _Line) -> bool:
    m = P.RENDEZVOUS.search(ln.msg) if any(w in ln.low for w in _RDZV_WORDS) else None
    if not m:
        return False
    emit(
        "rendezvous",
        ln.msg,
        ln.no,
        ln.ctx,
        joined=_int(m.group("joined")),
        expected=_int(m.group("expected")),
        addr=m.group("addr"),
        port=_int(m.group("port")),
        timeout_s=_int(m.group("seconds")),
        detail=m.group(0)[:200],
    )
    return True


def _network(emit: Emit, ln: _Line) -> bool:
    net = network_problem(ln.msg)
    if net and not (ln.loggy or ln.nccl) and net["problem"] not in _NAMED_NET:
        net = None  # a vaguer phrase in a line of prose
    if not net:
        return False
    ctx = ln.ctx
    own = net.pop("self_rank", None)  # gloo names the failing process: "(rank=8, size=16, …)"
    if own is not None and ctx.get("rank") is None:
        ctx = dict(ctx, rank=own)
    emit("network", ln.msg, ln.no, ctx, nccl=ln.nccl, **net)
    return True


def _gloo_timeout(emit: Emit, ln: _Line) -> bool:
    m = P.GLOO_TIMEOUT.search(ln.msg) if "timed out" in ln.low or "timeout" in ln.low else None
    if m:
        timeout_ms = int(m.group("ms")) if m.group("ms") else None
        emit("gloo_timeout", ln.msg, ln.no, ln.ctx, timeout_ms=timeout_ms, op=m.group("op") if m.group("op") else None)
    return bool(m)


def _peer_error(emit: Emit, ln: _Line) -> bool:
    msg = ln.msg
    m = P.PEER.search(msg) if ln.loggy and any(w in ln.low for w in _PEER_WORDS) else None
    if not m:
        return False
    a = P.PEER_ADDR.search(msg)
    pr = P.PEER_RANK.search(msg)
    emit(
        "peer_error",
        msg,
        ln.no,
        ln.ctx,
        peer=a.group(1) if a else None,
        peer_rank=int(pr.group(1)) if pr else None,
        detail=m.group(0),
        nccl=ln.nccl,
    )
    return True


def _nccl_error(emit: Emit, ln: _Line) -> bool:
    m = P.NCCL_ERR.search(ln.msg) if ln.loggy and "nccl" in ln.low else None
    if m:
        emit("nccl_error", ln.msg, ln.no, ln.ctx, code=m.group(1))
    return bool(m)


def _torchrun_exit(emit: Emit, ln: _Line) -> bool:
    m = P.TR_FAILED.search(ln.msg) if "exitcode" in ln.msg else None
    if not m:
        return False
    code = int(m.group("code"))
    c = dict(ln.ctx, local=int(m.group("local")), rank=None)
    sig = P.SIGNALS.get(-code) if code < 0 else None
    emit("exit", ln.msg, ln.no, c, exitcode=code, pid=int(m.group("pid")), signal=sig)
    if sig == "SIGKILL":
        emit("killed", ln.msg, ln.no, c, signal=sig, exitcode=code, source="torchrun")
    return True


def _signal(emit: Emit, ln: _Line) -> bool:
    low = ln.low
    m = P.SIGNAL.search(ln.msg) if ("sig" in low or "kill" in low or "exit" in low or "oom" in low) else None
    if not m or ln.in_summary:
        return False
    name = m.group("name") or m.group("name2") or m.group("name3")
    if not name and m.group("code"):
        name = P.SIGNALS.get(int(m.group("code")) - 128)
    if not name and m.group("num4"):
        name = P.SIGNALS.get(int(m.group("num4")), f"signal {m.group('num4')}")
    emit("killed", ln.msg, ln.no, ln.ctx, signal=name or "SIGKILL", source="log", host_oom=bool(m.group("oomkill")))
    return True


def _crash(emit: Emit, ln: _Line) -> bool:
    hit = bool(any(w in ln.low for w in _CRASH_WORDS) and P.CRASH.search(ln.msg))
    if hit:
        emit("crash", ln.msg, ln.no, ln.ctx)
    return hit


def _nccl_warn(emit: Emit, ln: _Line) -> bool:
    hit = ln.nccl and " NCCL WARN " in f" {ln.msg} "
    if hit:
        emit("nccl_warn", ln.msg, ln.no, ln.ctx)
    return hit


def _progress(emit: Emit, ln: _Line) -> bool:
    for rx in P.PROGRESS:
        m = rx.search(ln.msg)
        if m:
            emit("progress", ln.msg, ln.no, ln.ctx, step=int(m.group("step")))
            return True
    return False


_FAMILIES = (
    _usage_error,
    _net_setting,
    _oom,
    _watchdog,
    _work_state,
    _dump_signal,
    _mismatch,
    _monitored_barrier,
    _rendezvous,
    _network,
    _gloo_timeout,
    _peer_error,
    _nccl_error,
    _torchrun_exit,
    _signal,
    _crash,
    _nccl_warn,
)


def classify_message(
    emit: Emit, no: int, msg: str, ctx: dict, nccl: bool, in_summary: bool, exc: bool, in_traceback: bool
) -> None:
    """Emit the event of the first family the line belongs to; progress only outside a traceback or summary."""
    ln = _Line(no, msg, ctx, nccl, exc, in_summary)
    for family in _FAMILIES:
        if family(emit, ln):
            return
    if in_traceback or in_summary:
        return
    _progress(emit, ln)
