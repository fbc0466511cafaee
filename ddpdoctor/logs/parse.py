"""Turn one text log file into LogEvents (and keep its lines for pattern search).

Lines are attributed to a rank in this order: a ``[rankN]:`` prefix; the rank of the
torchrun failure-summary entry the line belongs to; ``[Rank N]`` inside a c10d message;
the NCCL process (``host:pid``, resolved later from ``comm … rank R``); a torchrun
``[defaultN]:`` prefix (a local rank, resolved later); the file's path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import patterns as P
from .discover import LogFile
from .families import join_wrapped, mismatch_text, network_problem
from .message_kinds import classify_message
from .model import LogEvent, norm
from .nccl import NcclCollector
from .prefix import split, split_nccl_segments
from .torchrun_summary import TorchrunSummary


def _join_indented(lines: list[str], i: int, limit: int = 4) -> tuple[str, int]:
    """A gloo message wrapped onto indented lines (remote=[…], (rank=N, …)): the joined text and the 1-based
    number of its last line. Traceback frames ("  File …") are not continuations."""
    text, j = lines[i], i
    while j + 1 < len(lines) and j - i < limit:
        nxt = lines[j + 1]
        if not nxt[:1].isspace() or not nxt.strip() or nxt.lstrip().startswith("File "):
            break
        text = text.rstrip() + " " + nxt.strip()
        j += 1
    return text, j + 1


@dataclass
class Parsed:
    events: list[LogEvent] = field(default_factory=list)
    # (provisional event-like record per line for search): (line_no, text, rank, local, pidkey, time)
    lines: list[tuple] = field(default_factory=list)
    local_map: dict[tuple[str, int], int] = field(default_factory=dict)  # (host, local) -> global, torchrun
    hosts: set = field(default_factory=set)


def exception_category(msg: str, emsg: str | None = None) -> str:
    """What kind of error an exception's line reports (its message ``emsg``, default the line)."""
    return (
        "oom"
        if P.OOM.search(msg)
        else "mismatch"
        if mismatch_text(msg if emsg is None else emsg)
        else "timeout"
        if P.WATCHDOG.search(msg) or P.GLOO_TIMEOUT.search(msg) or P.MONITORED.search(msg)
        else "network"
        if network_problem(msg)
        else "peer"
        if P.PEER.search(msg)
        else "other"
    )


class FileParser:
    def __init__(self, lf: LogFile, default_year: int, nccl: NcclCollector):
        self.lf = lf
        self.file = str(lf.path)
        self.year = default_year
        self.nccl = nccl
        self.out = Parsed()
        self.tb_open: set = set()  # streams inside a Python traceback
        self.summary = TorchrunSummary(self)  # torchrun's "Root Cause" / "Failures" block
        self.stream_time: dict = {}  # last timestamp seen per (rank, local) stream of this file
        self.last_using = None  # ((host, pidkey), "NET/Socket : Using") awaiting its list
        self.cxx: dict = {}  # stream -> the C++ exception type std::terminate reported, or True

    # ---------------------------------------------------------------- events
    def _event(self, kind, text, line_no, ctx, time=None, **data) -> LogEvent:
        rank = ctx.get("rank")
        t = time if time is not None else ctx.get("time")
        if t is None and ctx.get("after") is not None:  # a line without time in a timed stream
            t, data["time_inferred"] = ctx["after"], True
        ev = LogEvent(rank, t, kind, norm(text)[:2000], self.file, line_no, data)
        if rank is None:
            if ctx.get("pidkey"):
                ev.data["_pidkey"] = ctx["pidkey"]
            if ctx.get("local") is not None:
                ev.data["_local"] = ctx["local"]
            elif self.lf.rank is not None:
                if self.lf.local:
                    ev.data["_local"] = self.lf.rank
                else:
                    ev.rank = self.lf.rank
        self.out.events.append(ev)
        return ev

    # ---------------------------------------------------------------- lines
    def parse(self, text: str) -> Parsed:
        lines = text.splitlines()
        skip_to = 0
        for no, raw in enumerate(lines, 1):
            if no <= skip_to:
                continue
            if not raw.strip() or raw.startswith("# "):  # blank, or a comment/heading of a pasted ticket
                continue
            if "Detected mismatch between collectives" in raw:
                raw, skip_to = join_wrapped(lines, no - 1)
            elif (
                "connectFullMesh" in raw
                or "Unable to resolve hostname" in raw
                or ("WorkNCCL(" in raw and raw.rstrip().endswith(")"))
                or (  # a watchdog report wrapped after the work
                    raw.rstrip().endswith("collective operation timeout:")
                )
            ):  # ... or before it, the work indented below
                raw, skip_to = _join_indented(lines, no - 1)
            parts = P.GLUED.split(raw) if ("[E" in raw or "[rank" in raw or "]:" in raw[1:]) else [raw]
            for part in parts:
                self._line(no, part)
        self.summary.close_entry()
        return self.out

    def _line(self, no: int, raw: str) -> None:
        ln = split(raw, self.year)
        skey = (ln.rank, ln.local)
        if ln.time is not None:
            self.stream_time[skey] = ln.time
        ctx = {
            "rank": ln.rank,
            "local": ln.local,
            "time": ln.time,
            "pidkey": None,
            "after": self.stream_time.get(skey) if ln.time is None and skey != (None, None) else None,
        }
        msg = ln.msg
        if self.summary.line(no, msg, ctx):
            self.out.lines.append((no, msg, ctx["rank"], ctx["local"], None, ctx["time"]))
            return
        if ln.nccl is not None:
            for hdr, seg in split_nccl_segments(msg) or [(ln.nccl, msg)]:
                key = f"{hdr['host']}:{hdr['pid']}"
                self.out.hosts.add(hdr["host"])
                c = dict(ctx, pidkey=key if ctx["rank"] is None else None)
                self.nccl.feed(hdr, seg, self.lf.rank if not self.lf.local else None)
                u = P.USING_OPEN.search(seg)
                self.last_using = ((hdr["host"], key), u.group(0)) if u else None
                self.out.lines.append((no, seg, c["rank"], c["local"], c["pidkey"], c["time"]))
                self._classify(no, seg, c, nccl=True)
            return
        if "NCCL version" in msg:
            self.nccl.feed_plain(msg)
        if self.last_using is not None and P.IFACE_LIST.match(msg):
            self.nccl.feed_plain(self.last_using[1] + " " + msg.strip(), *self.last_using[0])
            return  # an interface list NCCL printed over several lines
        if ln.rank is None:
            m = P.RANK_IN_MSG.search(msg)
            if m and ("Watchdog" in msg or "NCCL" in msg or "ProcessGroup" in msg or "PG " in msg):
                ctx["rank"] = int(m.group("rank"))
        self.out.lines.append((no, msg, ctx["rank"], ctx["local"], None, ctx["time"]))
        self._classify(no, msg, ctx)

    # ---------------------------------------------------------------- classification
    def _uncaught_cxx(self, no: int, msg: str, ctx: dict, stream) -> bool:
        """std::terminate's report of an uncaught C++ exception ("terminate called after throwing an instance of
        'gloo::IoException'", then "what():  <message>", then "Aborted (core dumped)") is an error like a Python
        exception: the ``what()`` text is what the process died of, the abort its consequence. True when the
        line was consumed (the terminate line; the abort after a ``what()``); a ``what()`` line becomes an
        exception event and is then classified as any line (a network fault, a catalogued message)."""
        m = P.CXX_TERMINATE.search(msg)
        if m:
            self.cxx[stream] = m.group("type") or "std::exception"
            return True
        etype = self.cxx.get(stream)
        if isinstance(etype, str):
            w = P.CXX_WHAT.match(msg)
            if w:
                text = w.group("msg").strip()
                self.cxx[stream] = True
                self._event(
                    "exception",
                    f"{etype}: {text}",
                    no,
                    ctx,
                    exc_type=etype,
                    message=text[:1000],
                    category=exception_category(text),
                    source="c++",
                )
                return False
            self.cxx.pop(stream)
            self._event("crash", f"terminate called after throwing an instance of '{etype}'", no, ctx)
            return False
        if etype is True and P.CXX_ABORT.search(msg):
            self.cxx.pop(stream)
            return True
        self.cxx.pop(stream, None)
        return False

    def _classify(self, no: int, msg: str, ctx: dict, nccl: bool = False, in_summary: bool = False) -> None:
        if not P.ANY.search(msg) and not P.ANY_NET.search(msg):
            return
        stream = (ctx.get("rank"), ctx.get("local"), ctx.get("pidkey"))
        if P.TRACEBACK.match(msg):
            self.tb_open.add(stream)
            return
        if stream in self.tb_open and not in_summary and msg[:1].isspace():
            return  # a frame or source line of a traceback
        if not nccl and not in_summary and self._uncaught_cxx(no, msg, ctx, stream):
            return
        exc = None if nccl else P.EXC_LINE.match(msg)
        spawn = P.SPAWN_EXIT.search(msg) if exc and "terminated with" in msg else None
        if spawn:
            # ProcessExitedException: the report of a dead child, not an error of its own
            self.tb_open.discard(stream)
            c = dict(ctx, rank=int(spawn.group("idx"))) if ctx.get("rank") is None else ctx
            if spawn.group("sig"):
                self._event("killed", msg, no, c, signal=spawn.group("sig"), source="mp.spawn")
            else:
                self._event("exit", msg, no, c, exitcode=int(spawn.group("code")), source="mp.spawn")
            return
        worker = P.DL_WORKER_KILLED.search(msg) if exc else None
        if worker:
            # the rank's error is a symptom: a DataLoader worker of this rank was killed
            self.tb_open.discard(stream)
            what = worker.group("what").strip()
            sig = "SIGKILL" if what.lower() == "killed" else ("SIG" + what.split()[0].upper() if what else "SIGKILL")
            self._event("killed", msg, no, ctx, signal=sig, source="dataloader_worker", host_oom=sig == "SIGKILL")
            return
        if exc and (stream in self.tb_open or in_summary or "." in exc.group("type") or exc.group("msg")):
            self.tb_open.discard(stream)
            etype, emsg = exc.group("type"), (exc.group("msg") or "").strip()
            self._event(
                "exception",
                f"{etype}: {emsg}",
                no,
                ctx,
                exc_type=etype,
                message=emsg[:1000],
                category=exception_category(msg, emsg),
            )
        if not exc and not nccl and P.DDP_UNUSED.match(msg.strip()):
            # the reducer's error quoted on its own (the RuntimeError prefix cut off): the same Python error
            self._event(
                "exception",
                f"RuntimeError: {msg.strip()}",
                no,
                ctx,
                exc_type="RuntimeError",
                message=msg.strip()[:1000],
                category="other",
            )
            return
        classify_message(self._event, no, msg, ctx, nccl, in_summary, bool(exc), stream in self.tb_open)
