"""Error wording lives in the message catalogue (rules/messages/); the log parser's Python keeps format only
(docs/DESIGN.md, "Wording in the catalogue, format in code"). Every regex of logs/patterns.py is either built
from a catalogue entry by id or named below as format, with the reason: a new regex must pick a side."""

import re

from ddpdoctor.logs import patterns as P
from ddpdoctor.logs.catalogue import default_messages

# the regexes that read a log's structure or the fields inside a message, not a message's wording
FORMAT = {
    "RANK_IN_MSG": "the [PG N Rank N] tag ProcessGroupNCCL puts before its messages",
    "WORK_ARG": "key=value fields of a WorkNCCL(...) description",
    "FP_KEYS": "key= fields of a CollectiveFingerPrint(...)",
    "PEER_ADDR": "an IPv4 address and port inside a message",
    "PEER_RANK": "'from/to/with rank N' inside a message",
    "GLOO_REMOTE": "gloo's remote=[addr] field",
    "GLOO_SELF_RANK": "gloo's (rank=N, size=M field",
    "NCCL_BOOT_TRACE": "NCCL's error-return trace 'bootstrap.cc:270 -> 2' (file:line -> code)",
    "TRANSPORT_P2P": "the transport named in an NCCL INFO channel line",
    "NET_IFNAME_SET": "NCCL's INFO line reporting a *_SOCKET_IFNAME value",
    "USING_OPEN": "NCCL's INFO line that lists interfaces on the following lines",
    "IFACE_LIST": "the interface list lines themselves",
    "EXC_LINE": "the last line of a Python traceback (Type: message)",
    "TRACEBACK": "a Python traceback header",
    "TR_FAILED": "torchrun's per-worker failure line (exitcode, local_rank, pid)",
    "TR_ROOT": "torchrun's failure summary: Root Cause header",
    "TR_FAILURES": "torchrun's failure summary: Failures header",
    "TR_ENTRY": "torchrun's failure summary: an [N]: entry",
    "TR_FIELD": "torchrun's failure summary: a field line",
    "TR_RANK": "torchrun's failure summary: rank (local_rank)",
    "TR_EXIT": "torchrun's failure summary: exit code (pid) (signal)",
    "TR_TIME": "torchrun's failure summary: its timestamp",
    "TR_RULE": "torchrun's failure summary: a ==== rule",
    "GLUED": "two log lines glued into one (a progress bar without a newline)",
    "LOGGY": "a line that looks like program output rather than prose pasted around it",
    "ANY": "a cheap gate: a superset of the words of the wordings (a line that cannot match is skipped)",
    "ANY_NET": "the same gate for the network forms",
}


def _regexes() -> dict[str, re.Pattern]:
    return {n: v for n, v in vars(P).items() if isinstance(v, re.Pattern) and n.isupper()}


def test_every_regex_of_patterns_is_catalogued_or_named_format():
    loose = sorted(n for n, rx in _regexes().items() if rx.pattern not in P.FROM_CATALOGUE and n not in FORMAT)
    assert not loose, f"regexes in logs/patterns.py neither built from the catalogue nor named format: {loose}"


def test_the_format_list_names_only_regexes_that_exist_and_are_not_catalogued():
    rxs = _regexes()
    stale = sorted(n for n in FORMAT if n not in rxs or rxs[n].pattern in P.FROM_CATALOGUE)
    assert not stale, stale


def test_a_catalogued_regex_is_the_entry_s_wording():
    ids = {m.id for m in default_messages()}
    assert set(P.FROM_CATALOGUE.values()) <= ids
    assert P.FROM_CATALOGUE[P.WATCHDOG.pattern] == "pg_nccl.watchdog_timeout"
    wording = next(m for m in default_messages() if m.id == "process.killed_by_signal").parse[0].pattern
    assert P.SIGNAL.pattern == f"(?i:{wording[4:]})"


# a parse wording whose excerpt line the parser's cheap gate (patterns.ANY / ANY_NET, parse.py _classify) skips:
# known, reported, left as is because fixing it changes answers (issue 30 keeps them identical). A what() line
# without any gate word ("what():  [enforce fail at …pair.cc:446] op.preamble.length <= op.nbytes") never
# becomes the exception event; the abort after it is reported as the terminate line's crash instead.
GATE_MISSES = {("process.uncaught_cxx_exception", 1)}


def test_the_parser_s_gate_lets_every_catalogued_wording_through():
    """The gates are supersets of the wording for speed; a wording added to the catalogue must pass them, or
    the parser never sees it."""
    missed = []
    for msg in default_messages():
        for i, rx in enumerate(msg.parse):
            lines = [line for ex in msg.excerpts for line in ex.text.splitlines() if rx.search(line)]
            if any(not (P.ANY.search(line) or P.ANY_NET.search(line)) for line in lines):
                missed.append((msg.id, i))
    assert set(missed) == GATE_MISSES, missed
