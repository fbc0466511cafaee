"""``failure.network.*`` and ``failure.exit.*``: bootstrap/interface/transport faults and non-zero exits.

When every rank fails alike (the same bootstrap error, the same usage error, the same exit code) the
cause is configuration shared by all ranks, not one rank with symptoms on the others: ``shared`` is
then True and the root-cause rank is None.
"""

from __future__ import annotations

import re
from collections import Counter

from . import patterns as P
from .model import LogEvent

# most specific first: a named interface that does not exist beats "no interface found", …
NET_PROBLEMS = (
    "ifname_missing",
    "no_interface",
    "subnet",
    "bind",
    "loopback",
    "p2p",
    "ib",
    "connect",
    "bootstrap",
    "system",
)


def _ranks(evs) -> list[int]:
    return sorted({e.rank for e in evs if e.rank is not None})


def _first(evs: list[LogEvent]) -> LogEvent | None:
    timed = [e for e in evs if e.time is not None]
    return min(timed, key=lambda e: e.time) if timed else (evs[0] if evs else None)


def _covers_all(ranks: list[int], known: set, world_size: int | None) -> bool:
    """Two or more ranks, and every rank the logs (or the world size) know of."""
    if len(ranks) < 2:
        return False
    everyone = set(range(world_size)) if world_size else set(known)
    return set(ranks) >= everyone


def _ifname_form(v: str | None) -> str | None:
    """What a *_SOCKET_IFNAME value is: interface names, NCCL's ``^`` exclusion list, or an IP address
    (gloo takes only names)."""
    if not v:
        return None
    if v.startswith("^"):
        return "exclusion"
    if re.fullmatch(r"[\d.]+|[0-9a-fA-F:]+:[0-9a-fA-F:]*", v):
        return "address"
    return "name"


def network_facts(nets: list[LogEvent], settings: list[LogEvent], world_size: int | None, known: set) -> dict:
    problems = [e.data.get("problem") for e in nets if e.data.get("problem")]
    problem = next((p for p in NET_PROBLEMS if p in problems), None)
    main = [e for e in nets if e.data.get("problem") == problem] if problem else nets
    first = _first(main)
    configured = {}
    for e in settings:
        configured.setdefault(e.data["var"], e.data["value"])
    ifname = next((e.data.get("ifname") for e in main if e.data.get("ifname")), None)
    if ifname is None and problem in ("ifname_missing", "no_interface"):
        ifname = configured.get("NCCL_SOCKET_IFNAME") or configured.get("GLOO_SOCKET_IFNAME")
    ranks = _ranks(main)
    backends = Counter(e.data.get("backend") for e in main if e.data.get("backend"))
    return {
        "failure.network.present": bool(nets),
        "failure.network.problem": problem,
        "failure.network.ranks": ranks,
        "failure.network.shared": problem in ("ifname_missing", "no_interface", "subnet", "bind", "loopback")
        and (_covers_all(ranks, known, world_size) or not ranks),
        "failure.network.ifname": ifname,
        "failure.network.ifname_form": _ifname_form(ifname),
        "failure.network.configured": configured,
        "failure.network.backend": backends.most_common(1)[0][0] if backends else None,
        "failure.network.remote": next((e.data.get("remote") for e in main if e.data.get("remote")), None),
        "failure.network.remote_loopback": any(str(e.data.get("remote") or "").startswith("127.") for e in main),
        "failure.network.ib_error": next(
            (e.data.get("ib_error") for e in main if e.data.get("ib_error") is not None), None
        ),
        "failure.network.detail": first.data.get("detail") if first else None,
        "failure.network.text": first.text[:300] if first else None,
        "failure.network.suggested_ifname": None,  # filled from host records / NCCL's list (analyze.py)
        "failure.network.interfaces": [],
        "failure.network.suggestion_source": None,
        "failure.network.suggested_gloo_ifname": None,
    }


# signals that stop a process from outside (a launcher stopping its ranks, a scheduler, `timeout`, a user, a
# closed terminal); SIGSEGV, SIGABRT and the like come from inside the process (a crash)
STOP_SIGNALS = ("SIGTERM", "SIGKILL", "SIGINT", "SIGHUP")


def signal_name(code) -> str | None:
    """The signal a negative exit code stands for (a launcher's -15 is SIGTERM), else None."""
    import signal

    if not isinstance(code, int) or isinstance(code, bool) or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return None


def _stopped_from_outside(codes: dict[int, int], known: set) -> bool:
    """Every rank the logs know of ended on a stop signal: a stop from outside, not the script's own exit."""
    return bool(codes) and set(codes) >= set(known) and all(signal_name(c) in STOP_SIGNALS for c in codes.values())


def exit_facts(exits: list[LogEvent], usage: list[LogEvent], known: set) -> dict:
    codes: dict[int, int] = {}
    for e in exits:
        c = e.data.get("exitcode")
        if e.rank is not None and isinstance(c, int) and c != 0:
            codes.setdefault(e.rank, c)
    bad = [e for e in exits if isinstance(e.data.get("exitcode"), int) and e.data["exitcode"] != 0]
    first = _first(bad)
    u = _first(usage)
    usage_ranks = _ranks(usage)
    same_code = len(set(codes.values())) == 1 and _covers_all(sorted(codes), known, None)
    return {
        "failure.exit.present": bool(bad or usage),
        "failure.exit.ranks": sorted(set(codes) | set(usage_ranks)),
        "failure.exit.codes": {str(r): c for r, c in sorted(codes.items())},
        "failure.exit.code": (2 if u is not None and first is None else first.data.get("exitcode") if first else None),
        "failure.exit.signal": (first.data.get("signal") or signal_name(first.data.get("exitcode"))) if first else None,
        "failure.exit.signals": sorted({n for c in codes.values() if (n := signal_name(c))}),
        "failure.exit.from_outside": _stopped_from_outside(codes, known) and u is None,
        "failure.exit.usage": u.data.get("message") if u else None,
        "failure.exit.usage_ranks": usage_ranks,
        "failure.exit.program": u.data.get("prog") if u else None,
        "failure.exit.shared": bool(same_code or _covers_all(usage_ranks, known, None)),
    }


def suspect_p2p(f: dict, known: dict | None = None) -> None:
    """A hang where every rank waits in the same collective (no rank behind, none failed on its own), or an
    illegal memory access, while NCCL links the GPUs of one node by P2P (``via P2P/IPC``, ``P2P/CUMEM``,
    ``P2P/direct pointer``) and P2P is not disabled: the P2P transport is the first suspect (broken
    IOMMU/ACS/driver P2P hangs or corrupts transfers; NCCL_P2P_DISABLE=1 tells)."""
    if not f.get("nccl.p2p_paths") or f.get("nccl.p2p_disabled") or f.get("nccl.net_paths"):
        return
    kind, text = f.get("failure.root_cause.kind"), str(f.get("failure.root_cause.text") or "")
    hang = kind == "timeout" and f.get("failure.root_cause.rank") is None
    illegal = kind in ("crash", "exception", "timeout") and bool(P.ILLEGAL_ACCESS.search(text.lower()))
    # a pasted log that ends once NCCL has set up its channels: no error, and not a single training step
    known = known or {}
    ran = known.get("trace.present") is True or known.get("run.status") in ("complete", "partial")
    silent = kind is None and not (f.get("logs.event_counts") or {}).get("progress") and not ran
    if not (hang or illegal or silent):
        return
    f.update(
        {
            "failure.network.present": True,
            "failure.network.problem": "p2p_suspected",
            "failure.network.ranks": list(f.get("failure.timeout.ranks") or f.get("failure.ranks") or []),
            "failure.network.shared": False,
            "failure.network.backend": "nccl",
            "failure.network.detail": (
                "an illegal memory access"
                if illegal
                else "every rank waited in the same collective"
                if hang
                else "the logs end, with no training step and no error,"
            )
            + f" while NCCL linked the GPUs via {', '.join(f.get('nccl.p2p_via') or ['P2P'])}",
        }
    )
    f["failure.root_cause.kind"] = "network"
    f["failure.root_cause.rank"] = None


def promote_bad_interface(f: dict) -> None:
    """NCCL picked a loopback/virtual interface, or each node a different one, and the job then hung, lost a
    peer, failed inside NCCL or never assembled: that choice is the cause (the network rule names the interface to use)."""
    problem = f.get("nccl.ifname_problem")
    if problem not in ("only_virtual", "some_virtual", "names_differ") or f.get("failure.network.problem") not in (
        None,
        "connect",
        "bootstrap",
        "system",
    ):
        return  # (a connect failure is what the wrong interface leads to)
    kind = f.get("failure.root_cause.kind")
    if kind == "network" and f.get("failure.network.problem") in ("connect", "bootstrap", "system"):
        kind = "timeout"  # treat like the hang it causes
    nccl_exc = kind == "exception" and "nccl" in str(f.get("failure.exception.message") or "").lower()
    if kind not in ("timeout", "remote_error", "rendezvous", "seq_behind") and not nccl_exc:
        return
    bad = f.get("nccl.bad_ifnames") or []
    f.update(
        {
            "failure.network.present": True,
            "failure.network.problem": "bad_interface",
            "failure.network.ranks": list(f.get("failure.ranks") or []),
            "failure.network.shared": True,
            "failure.network.backend": "nccl",
            "failure.network.ifname": ",".join(bad) if bad else None,
            "failure.network.detail": ("NCCL uses " + ", ".join(bad) + " (loopback or virtual)")
            if bad
            else "the nodes chose different interfaces ("
            + "; ".join(f"{h}: {', '.join(v)}" for h, v in (f.get("nccl.ifnames_by_host") or {}).items())
            + ")",
        }
    )
    if (
        not f.get("failure.network.suggested_ifname")
        and f.get("nccl.suggested_ifname")
        and f.get("nccl.suggested_ifname") not in bad
    ):
        f["failure.network.suggested_ifname"] = f["nccl.suggested_ifname"]
        f["failure.network.suggestion_source"] = "NCCL's interface list"
        name = f["nccl.suggested_ifname"]
        f["failure.network.suggested_gloo_ifname"] = None if str(name).startswith("^") else name
    f["failure.root_cause.kind"] = "network"
    f["failure.root_cause.rank"] = None
