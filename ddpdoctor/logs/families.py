"""Message families that need more than one regex: desync reports (fingerprints with nested parentheses,
wrapped over lines, older and newer forms) and network/bootstrap/transport faults (NCCL, gloo, c10d)."""

from __future__ import annotations

import re

from . import patterns as P


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def parse_fingerprint(s: str) -> dict:
    out, keys = {}, list(P.FP_KEYS.finditer(s))
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(s)
        out[m.group(1)] = s[m.end() : end].strip().rstrip(",").strip()
    return out


_CONT_PREFIX = re.compile(r"^\s*(?:\[(?:rank|default)\d+\]:\s?)?")


def join_wrapped(lines: list[str], i: int, limit: int = 12) -> tuple[str, int]:
    """A desync report wrapped over several lines (pasted or logged with newlines): the joined text and the
    1-based number of its last line."""
    text, j = lines[i], i
    while (
        j + 1 < len(lines)
        and j - i < limit
        and (
            text.count("(") > text.count(")") or "but Rank" not in text or text.rstrip().endswith(("collective:", ","))
        )
    ):
        nxt = lines[j + 1]
        if "Detected mismatch between collectives" in nxt:
            break  # the next rank's own report (older one-rank-per-line form)
        if not nxt.strip():
            if "but Rank" in text:
                break
            j += 1  # a blank line inside the pasted report
            continue
        text = text.rstrip() + " " + _CONT_PREFIX.sub("", nxt).strip()
        j += 1
    return text, j + 1


def _balanced(s: str, start: int) -> tuple[str, int]:
    """The text inside the parenthesis that opens at ``s[start]`` (nested ones kept), and the index after it."""
    depth = 0
    for i in range(start, len(s)):
        if s[i] == "(":
            depth += 1
        elif s[i] == ")":
            depth -= 1
            if depth == 0:
                return s[start + 1 : i], i + 1
    return s[start + 1 :], len(s)


def mismatch_text(msg: str) -> dict | None:
    """Every desync report PyTorch prints: ProcessGroupWrapper's fingerprints (nested parentheses such as
    ``TensorOptions(dtype=float (default), …)``, with or without commas between fields, the
    ``Collectives differ in the following aspects`` tail), its shape verification, and DDP's model check."""
    if P.DESYNC.search(msg):
        fps = []
        for m in P.FP_RANK.finditer(msg):
            body, _end = _balanced(msg, m.end() - 1)
            fps.append((int(m.group(1)), parse_fingerprint(body)))
        d = P.DIFFER.search(msg)
        out = {"differ": d.group(1).strip()[:300] if d else ""}
        bare = P.BARE_OP.search(msg)  # older: "but Rank 1 is running collective: REDUCE."
        if len(fps) == 1 and bare and int(bare.group(1)) != fps[0][0]:
            fps.append((int(bare.group(1)), {"OpType": bare.group(2)}))
        if len(fps) >= 2:
            (ra, a), (rb, b) = fps[0], fps[1]
        else:
            ranks = [int(x) for x in re.findall(r"Rank (\d+)", msg)[:2]]
            ra, rb = (ranks + [None, None])[:2]
            a, b = (fps[0][1] if fps else {}), {}
        if d:  # the diff tail gives what the fingerprints may lack
            sq, op = P.SEQ_DIFF.search(d.group(1)), P.OP_DIFF.search(d.group(1))
            if sq:
                a.setdefault("SequenceNumber", sq.group("a"))
                b.setdefault("SequenceNumber", sq.group("b"))
            if op:
                a.setdefault("OpType", op.group("a"))
                b.setdefault("OpType", op.group("b"))
        out.update(rank_a=ra, rank_b=rb, a=a, b=b)
        return out
    m = P.SHAPE_VERIFY.search(msg)
    if m:
        return {
            "rank_a": int(m.group("rank")),
            "rank_b": None,
            "a": {"OpType": m.group("op")},
            "b": {},
            "differ": "shape",
            "aspect": "shape",
        }
    m = P.DDP_MODEL_MISMATCH.search(msg)
    if m:
        if m.group("r1") and m.group("n2") == "0" and m.group("n1") != "0":
            return None  # a count that never arrived, not a different model (catalogue: ddp.param_count_not_received)
        if m.group("r1"):
            return {
                "rank_a": int(m.group("r1")),
                "rank_b": int(m.group("r2")),
                "a": {"params": m.group("n1")},
                "b": {"params": m.group("n2")},
                "differ": "model",
                "aspect": "model",
            }
        # "params[0] in this process with sizes [384, 128] appears not to match sizes of the same param in process
        # 0": the rank that logs it differs from process 0 (the parser knows the logging rank, not this text)
        a = {"param": int(m.group("param"))} if m.group("param") else {}
        if m.group("dims"):
            a[m.group("what").lower()] = m.group("dims")
        return {"rank_a": None, "rank_b": int(m.group("r0")), "a": a, "b": {}, "differ": "model", "aspect": "model"}
    return None


def network_problem(msg: str) -> dict | None:
    """A bootstrap / interface / transport fault: {"problem", "ifname", "remote", "detail"} or None."""
    low = msg.lower()
    if not any(w in low for w in P.NET_WORDS):
        return None
    m = P.NET_MISSING_IF.search(msg)
    if m:
        if m.group("gloo_if"):
            return {"problem": "ifname_missing", "ifname": m.group("gloo_if"), "backend": "gloo", "detail": m.group(0)}
        if m.group("remote"):
            return {"problem": "subnet", "remote": m.group("remote"), "backend": "nccl", "detail": m.group(0)}
        return {"problem": "no_interface", "backend": "nccl", "detail": m.group(0)}
    m = P.NET_LOOPBACK.search(msg)
    if m:
        return {
            "problem": "loopback",
            "backend": "gloo",
            "remote": "127.0.0.1",
            "remote_loopback": True,
            "detail": m.group(0),
        }
    m = P.NET_P2P.search(msg)
    if m:
        return {"problem": "p2p", "detail": m.group(0)[:200], "backend": "nccl"}
    m = P.NET_IB.search(msg) if ("ib" in low) else None
    if m:
        return {
            "problem": "ib",
            "remote": m.group("peer"),
            "ib_error": _int(m.group("status")),
            "backend": "nccl",
            "detail": m.group(0)[:200],
        }
    m = P.NET_BIND.search(msg) if "bind" in low else None
    if m and "server socket" not in low:
        return {"problem": "bind", "detail": (m.group("why") or m.group("why2") or "").strip(), "backend": None}
    m = P.NET_CONNECT.search(msg) if "connect" in low else None
    if m and ("nccl" in low or "bootstrap" in low or "socket" in low or "gloo" in low or "pair.cc" in low):
        a = P.PEER_ADDR.search(msg)
        b = P.GLOO_REMOTE.search(msg)
        own = P.GLOO_SELF_RANK.search(msg)
        return {
            "problem": "connect",
            "detail": m.group("why"),
            "remote": (b or a).group(1) if (b or a) else None,
            "backend": "gloo" if ("gloo" in low or "pair.cc" in low) else "nccl",
            "self_rank": int(own.group(1)) if own else None,
        }
    m = P.NCCL_BOOT_TRACE.search(msg)
    if m:
        what = {"2": "a system error", "3": "an internal error", "6": "a remote error"}[m.group("code")]
        return {"problem": "bootstrap", "backend": "nccl", "detail": f"{m.group(0)}, {what}"}
    if "nccl" in low and P.NCCL_SYSTEM.search(msg):
        return {"problem": "system", "backend": "nccl", "detail": "NCCL: unhandled system error"}
    if P.GLOO_MESH.search(msg):
        a = P.GLOO_REMOTE.search(msg) or P.PEER_ADDR.search(msg)
        own = P.GLOO_SELF_RANK.search(msg)
        return {
            "problem": "connect",
            "detail": "Gloo connectFullMesh failed",
            "remote": a.group(1) if a else None,
            "backend": "gloo",
            "self_rank": int(own.group(1)) if own else None,
        }
    return None
