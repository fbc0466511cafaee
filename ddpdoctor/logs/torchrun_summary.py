"""torchrun's error summary in a log: the "Root Cause (first observed failure)" and "Failures"
blocks that ``torch.distributed.elastic`` prints when a rank fails, one entry per failed rank
(rank, local rank, host, exit code or signal, time, error file, traceback).  Each entry becomes a
``torchrun_root`` / ``torchrun_failure`` event (and ``killed`` for a signal); the traceback lines are
classified with the entry's rank by the file's parser."""

from __future__ import annotations

from . import patterns as P
from .prefix import epoch


class TorchrunSummary:
    """Reads the summary block line by line for one :class:`~ddpdoctor.logs.parse.FileParser`."""

    def __init__(self, parser):
        self.parser = parser
        self.section = None  # "root" | "failures" | None
        self.entry: dict | None = None

    def line(self, no: int, msg: str, ctx: dict) -> bool:
        if P.TR_ROOT.match(msg):
            self.close_entry()
            self.section = "root"
            return True
        if P.TR_FAILURES.match(msg):
            self.close_entry()
            self.section = "failures"
            return True
        if self.section is None:
            return False
        if P.TR_RULE.match(msg) or msg.strip().startswith("-----"):
            self.close_entry()
            if P.TR_RULE.match(msg):
                self.section = None
            return True
        m = P.TR_ENTRY.match(msg)
        if m:
            self.close_entry()
            self.entry = {"line_no": no, "section": self.section, "tb": []}
            return True
        if self.entry is None:
            return msg.strip() == "<NO_OTHER_FAILURES>"
        f = P.TR_FIELD.match(msg)
        if f and not self.entry.get("tb_started"):
            key, val = f.group(1), f.group(2).strip()
            if key == "rank":
                r = P.TR_RANK.match(val)
                if r:
                    self.entry["rank"], self.entry["local"] = int(r.group(1)), int(r.group(2))
            elif key == "exitcode":
                e = P.TR_EXIT.match(val)
                if e:
                    self.entry["exitcode"], self.entry["pid"] = int(e.group(1)), int(e.group(2))
                    if e.group(3):
                        self.entry["signal"] = e.group(3)
            elif key == "time":
                t = P.TR_TIME.search(val)
                if t:
                    self.entry["time"] = epoch(*(int(g) for g in t.groups()))
            elif key == "traceback":
                self.entry["tb_started"] = True
                self.entry["tb"].append(val)
            else:
                self.entry[key] = val
            return True
        # traceback continuation inside the entry: classify it with the entry's rank
        self.entry["tb"].append(msg.strip())
        c = dict(ctx, rank=self.entry.get("rank"), time=self.entry.get("time"))
        self.parser._classify(no, msg, c, in_summary=True)
        return True

    def close_entry(self) -> None:
        e, self.entry = self.entry, None
        if not e or "rank" not in e:
            return
        host = e.get("host") or "?"
        if e.get("local") is not None:
            self.parser.out.local_map[(host, e["local"])] = e["rank"]
        code = e.get("exitcode")
        sig = e.get("signal")
        tb = " ".join(e["tb"])
        s = P.SIGNAL.search(tb)
        if s and s.group("name"):
            sig = s.group("name")
        if sig is None and code is not None and code < 0:
            sig = P.SIGNALS.get(-code)
        kind = "torchrun_root" if e["section"] == "root" else "torchrun_failure"
        text = f"torchrun: rank {e['rank']} (local {e.get('local')}) on {host} exit code {code}" + (
            f" ({sig})" if sig else ""
        )
        ctx = {"rank": e["rank"], "time": e.get("time")}
        self.parser._event(
            kind,
            text,
            e["line_no"],
            ctx,
            exitcode=code,
            signal=sig,
            host=host,
            pid=e.get("pid"),
            error_file=e.get("error_file"),
            traceback=tb[:500],
        )
        if sig in ("SIGKILL", "SIGTERM", "SIGSEGV", "SIGABRT", "SIGBUS", "SIGINT", "SIGHUP"):
            self.parser._event(
                "killed",
                text,
                e["line_no"],
                ctx,
                signal=sig,
                exitcode=code,
                source="torchrun",
                root=e["section"] == "root",
            )
