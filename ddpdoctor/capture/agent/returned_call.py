"""Part of the capture agent: the call a frame was making when the stack sampler got the GIL back.

CPython hands the GIL to a waiting thread only at its eval-breaker checks, and one of them comes right
after a call returns (``CALL`` / ``PRECALL`` on 3.11, ``CALL`` / ``CALL_KW`` on 3.12+, ``CALL_FUNCTION*`` /
``CALL_METHOD`` before).  So when the sampler has waited long for the GIL and its first sample finds the
training thread's innermost frame sitting on a call instruction, that call is what kept the GIL: a C
function (``pickle.dumps``, ``json``'s encoder, an extension that does not release it) has no Python frame
of its own, but its caller's frame shows the line and the bytecode shows the expression it called.

``at_call(code, lasti)``: whether the instruction at ``lasti`` is a call; ``callee(code, lasti)``: the
called expression as written (``pickle.dumps``, ``self.encoder.encode``), read backwards from the call
through the instructions that pushed its arguments, or None when it is not a plain dotted name (a call's
result, a subscript, a branch inside the arguments).  Standard library only; run once per gap, never per
sample.
"""

from __future__ import annotations

import dis

CALL_OPS = frozenset(
    {"CALL", "PRECALL", "CALL_KW", "CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_FUNCTION_EX", "CALL_METHOD"}
)
NAME_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_CLOSURE"})
ATTR_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


def _instructions(code) -> list:
    return list(dis.get_instructions(code))


def _effect(ins) -> int:
    return dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None, jump=False)


def _index_at(instructions: list, lasti: int) -> int | None:
    for i, ins in enumerate(instructions):
        if ins.offset == lasti:
            return i
    return None


def at_call(code, lasti: int) -> bool:
    """Whether ``code``'s instruction at byte offset ``lasti`` is a call."""
    try:
        op = code.co_code[lasti]
    except (AttributeError, IndexError, TypeError):
        return False
    return dis.opname[op] in CALL_OPS


def callee(code, lasti: int) -> str | None:
    """The dotted name the call at ``lasti`` called, as written in the source, or None."""
    try:
        return _callee(_instructions(code), lasti)
    except Exception:
        return None


def _callee(ins: list, lasti: int) -> str | None:
    i = _index_at(ins, lasti)
    if i is None or ins[i].opname not in CALL_OPS or ins[i].opname == "CALL_FUNCTION_EX":
        return None
    if ins[i].opname == "CALL" and i > 0 and ins[i - 1].opname == "PRECALL":
        i -= 1  # 3.11: PRECALL n, then CALL n; the check after the call may stop at either
    call = [ins[i]] + ([ins[i + 1]] if ins[i].opname == "PRECALL" and i + 1 < len(ins) else [])
    need = 1 - sum(_effect(c) for c in call)  # stack slots the call consumes: callable (+ self/NULL) + args
    total, start = 0, None
    for j in range(i - 1, -1, -1):
        if ins[j].opcode in _JUMPS or ins[j + 1].is_jump_target:
            return None  # a branch inside the arguments: the straight-line reading does not hold
        total += _effect(ins[j])
        if total == need:
            start = j
            break
        if total > need:
            return None
    if start is None:
        return None
    # the callable's own slots (the function, and self or NULL where the call takes one): all but the arguments
    args = ins[i].arg + (1 if ins[i].opname in ("CALL_KW", "CALL_FUNCTION_KW") else 0)
    names: list[str] = []
    pushed = 0
    for c in ins[start:i]:
        if c.opname == "PUSH_NULL":
            pass
        elif not names and c.opname in NAME_LOADS and isinstance(c.argval, str):
            names.append(c.argval)
        elif names and c.opname in ATTR_LOADS and isinstance(c.argval, str):
            names.append(c.argval)
        else:
            break
        pushed += _effect(c)
    return ".".join(names) if names and pushed == need - args else None
