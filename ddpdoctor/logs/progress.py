"""A failed run reasoned from the bundle first (issue #25 part 4): what ``ddpdoctor run`` recorded about
each rank -- steps completed and batches per epoch (settings.json), passes over the loader that ended
(``dataloader.batches`` − ``returned``), the collective each rank waited in and its file:line (the hang
dump), its exit -- names the cause of a collective timeout before any re-run is asked for:

- ``uneven_inputs``: the ranks had different numbers of batches per epoch and the shortest one ran out
  (its pass over the loader ended, or the hang dump shows it outside the training step) while another
  rank was still training: the others wait in a collective the short rank never joins;
- ``op_mismatch``: the hang dump shows ranks waiting in different collectives (one in ``barrier``, another
  in the gradient all-reduce): they took different code paths;
- ``early_exit``: a rank ended with exit code 0 while another still waited in a collective.

``failure.evidence_missing`` lists what the bundle lacked when none of these could be told (the timeout rule says it
when it asks for Flight Recorder).  Reads facts only: the bundle's (``known``) and the logs' (hang.py).
"""

from __future__ import annotations

# root causes a bundle-reasoned cause explains: the ranks only waited for a peer that was elsewhere
EXPLAINS = ("stopped", "timeout", "seq_behind", "remote_error", "exit", "flight_recorder")
_DDP_BACKWARD = "backward (DDP gradient all-reduce)"


def _per_rank(known: dict, name: str, ranks: list[int]) -> dict[int, object]:
    """rank -> value of a bundle fact (its ``.per_rank`` companion when ranks differ)."""
    per = known.get(f"{name}.per_rank")
    if isinstance(per, dict):
        return {int(r): v for r, v in per.items() if v is not None}
    v = known.get(name)
    return {r: v for r in ranks} if v is not None and ranks else {}


def _op(state: dict) -> str | None:
    op = state.get("op")
    return "all_reduce" if op == _DDP_BACKWARD else op


def _waits(state: dict) -> str | None:
    """'barrier at train.py:41' / 'the gradient all-reduce of backward at train.py:38' for a waiting rank."""
    if state.get("state") != "collective":
        return None
    op = "the DDP gradient all-reduce (in backward)" if state.get("op") == _DDP_BACKWARD else f"`{state.get('op')}`"
    return f"{op} at {state['where']}" if state.get("where") else op


def progress_facts(known: dict, facts: dict) -> dict:
    """``failure.bundle.*`` per rank, and the cause they name (``failure.bundle.cause``) or None."""
    hang = facts.get("failure.hang.ranks") or {}
    steps = {int(r): v for r, v in (known.get("run.steps_completed.per_rank") or {}).items() if isinstance(v, int)}
    ranks = sorted(set(steps) | {int(r) for r in hang})
    bpe = {
        r: v for r, v in _per_rank(known, "config.dataloader.batches_per_epoch", ranks).items() if isinstance(v, int)
    }
    passes = {r: v for r, v in _per_rank(known, "data.passes_finished", ranks).items() if isinstance(v, int)}
    states = {int(r): s for r, s in hang.items() if isinstance(s, dict)}
    out: dict = {
        "failure.bundle.steps_completed": {str(r): n for r, n in sorted(steps.items())} or None,
        "failure.bundle.batches_per_epoch": {str(r): n for r, n in sorted(bpe.items())} or None,
        "failure.bundle.passes_finished": {str(r): n for r, n in sorted(passes.items())} or None,
        "failure.bundle.waits": {str(r): w for r, s in sorted(states.items()) if (w := _waits(s))} or None,
        "failure.bundle.cause": None,
        "failure.bundle.rank": None,
        "failure.bundle.by_rank": [],
    }
    for r in ranks:
        out["failure.bundle.by_rank"].append(_sentence(r, steps.get(r), bpe.get(r), passes.get(r), states.get(r)))
    cause = _uneven(bpe, passes, states) or _op_mismatch(states) or _early_exit(states)
    if cause:
        out["failure.bundle.cause"], out["failure.bundle.rank"] = cause
        if cause[0] == "op_mismatch":
            out["failure.bundle.odd_rank"] = _odd_rank(states)
        if out["failure.bundle.cause"] == "uneven_inputs":
            short = out["failure.bundle.rank"]
            if short in bpe:
                longer = sorted((r for r in bpe if bpe[r] > bpe[short]), key=lambda r: -bpe[r])
                out["failure.bundle.uneven_other_rank"] = longer[0] if longer else None
                out["failure.bundle.uneven_batches"] = bpe[short]
                out["failure.bundle.uneven_other_batches"] = bpe[longer[0]] if longer else None
            else:  # no lengths: the rank whose loader had ended fewest passes
                out["failure.bundle.uneven_other_rank"] = min(passes, key=lambda r: (passes[r], r))
    out["failure.evidence_missing"] = _missing(known, facts, steps, bpe, states)
    return out


def _uneven(bpe: dict, passes: dict, states: dict):
    """The rank with the fewest batches per epoch, when the counts differ and it ran out first; without
    lengths (an IterableDataset), the rank whose loader ended more passes than another's."""
    if len(bpe) < 2 or len(set(bpe.values())) < 2:
        if len(bpe) < 2 and len(passes) >= 2 and max(passes.values()) > min(passes.values()):
            return "uneven_inputs", min(r for r, p in passes.items() if p == max(passes.values()))
        return None
    short = min(sorted(bpe), key=lambda r: bpe[r])
    others = [r for r in bpe if bpe[r] > bpe[short]]
    ran_out = passes.get(short, 0) > max((passes.get(r, 0) for r in others), default=0)
    st = states.get(short) or {}
    outside_step = st.get("state") == "exited" or (
        st.get("state") == "collective"
        and st.get("op") != _DDP_BACKWARD
        and any((states.get(r) or {}).get("op") == _DDP_BACKWARD for r in others)
    )
    return ("uneven_inputs", short) if ran_out or outside_step else None


def _op_mismatch(states: dict):
    waiting = {r: _op(s) for r, s in states.items() if s.get("state") == "collective" and s.get("op")}
    if len(set(waiting.values())) < 2:
        return None
    count = {op: sum(1 for o in waiting.values() if o == op) for op in waiting.values()}
    return "op_mismatch", min(sorted(waiting), key=lambda r: count[waiting[r]])


def _odd_rank(states: dict) -> int | None:
    """The one rank whose collective no other rank waits in, when exactly one is alone; else None (two
    ranks in two ops: either may be the one off its path)."""
    waiting = {r: _op(s) for r, s in states.items() if s.get("state") == "collective" and s.get("op")}
    alone = [r for r, op in waiting.items() if list(waiting.values()).count(op) == 1]
    return alone[0] if len(alone) == 1 else None


def _early_exit(states: dict):
    gone = sorted(r for r, s in states.items() if s.get("state") == "exited" and s.get("exit_code") == 0)
    waiting = [
        r
        for r, s in states.items()
        if s.get("state") == "collective" or (s.get("exit_code") or 0) != 0 or s.get("signal")
    ]
    return ("early_exit", gone[0]) if gone and waiting else None


def _missing(known: dict, facts: dict, steps: dict, bpe: dict, states: dict) -> list[str]:
    miss = []
    if not states or not any(s.get("state") in ("collective", "busy") for s in states.values()):
        miss.append(
            "stack dumps of the waiting ranks (`ddpdoctor run` writes each rank's hang_dump.jsonl once a rank "
            "has waited in a collective for 3 s)"
        )
    if not steps:
        miss.append(
            "each rank's steps completed and batches per epoch (each rank's settings.json in a `ddpdoctor run` bundle)"
        )
    elif len(bpe) < len(steps):
        miss.append("the batches per epoch of every rank (a loader without a length, or no DataLoader)")
    return miss


def _sentence(r: int, steps, bpe, passes, st) -> str:
    parts = [f"rank {r}:"]
    if steps is not None:
        parts.append(f"{steps} steps completed")
    if bpe is not None:
        parts.append(f"{bpe} batches per epoch")
    if passes:
        parts.append("its loader ran out of batches" + (" once" if passes == 1 else f" {passes} times"))
    st = st or {}
    if st.get("state") == "collective":
        parts.append(f"waited in {_waits(st)}" + (f" for {st['seconds']} s" if st.get("seconds") is not None else ""))
    elif st.get("state") == "busy":
        parts.append(
            f"busy in {st.get('function')}() at {st.get('where')}" if st.get("where") else "busy in its own code"
        )
    elif st.get("state") == "blocked":
        parts.append(f"blocked (not computing) in {st.get('function')}() at {st.get('where')}")
    elif st.get("state") == "exited":
        parts.append(f"exited with code {st['exit_code']}" if st.get("exit_code") is not None else "exited")
    if st.get("state") != "exited" and (st.get("exit_code") is not None or st.get("signal")):
        parts.append(
            f"then ended by {st['signal']}" if st.get("signal") else f"then exited with code {st['exit_code']}"
        )
    return parts[0] + " " + ", ".join(parts[1:]) if len(parts) > 1 else f"rank {r}: nothing recorded"


def apply_bundle_root(facts: dict) -> None:
    """The bundle's cause becomes the root cause when the logs' own is only the waiting it caused."""
    cause, rank = facts.get("failure.bundle.cause"), facts.get("failure.bundle.rank")
    if cause is None or facts.get("failure.root_cause.kind") not in EXPLAINS:
        return
    facts["failure.root_cause.kind"] = cause
    facts["failure.root_cause.rank"] = rank
    facts["failure.root_cause.text"] = "; ".join(facts.get("failure.bundle.by_rank") or []) or None
    facts["failure.present"] = True
    failing = set(facts.get("failure.ranks") or []) | {int(r) for r in facts.get("failure.bundle.waits") or {}}
    facts["failure.ranks"] = sorted(failing | {rank})
    facts["failure.symptom_ranks"] = sorted(failing - {rank})
    named = facts.get("failure.torchrun_named_rank")
    facts["failure.torchrun_misleading"] = bool(named is not None and named != rank)
