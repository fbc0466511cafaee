"""Part of the capture agent: the names ``gil.summarize`` gives the call that held the GIL in one of the
stack sampler's gaps, from the evidence that names it, best first:

- ``faulthandler``: the C watchdog's stack dumps written inside the gap (``parse_dumps``, ``dump_place``:
  the innermost user frame of a dump and the library function it called);
- ``RETURNED``: the sampler's first sample after the gap found the training thread's innermost frame on a
  call instruction: CPython gave the sampler the GIL at the eval-breaker check right after that call
  returned, so that call held it (``returned_call.py``; ``call_place``: the user frame of the sample and,
  when the call was made from user code itself, the expression it called, e.g. ``pickle.dumps``).

The frame the sampler happens to see after a gap that did not end on a call names nothing: the thread ran on
after the call returned (the sampler lost the GIL race, or read a file first) and was stopped at its next
check, e.g. in the next ``next(loader)``.  Standard library only.
"""

from __future__ import annotations

import os
import re

from .returned_call import at_call, callee

RETURNED = "the sampler, which resumed as the call returned"

_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+)$')


def parse_dumps(text: str, thread_id: int) -> list[list[tuple[str, int, str]]]:
    """faulthandler's text -> one stack per dump for that thread: [(file, line, function)], innermost first."""
    out, cur, mine = [], None, False
    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            mine = int(m.group(1), 16) == thread_id
            cur = [] if mine else None
            if mine:
                out.append(cur)
            continue
        if line.startswith("Timeout ("):
            mine, cur = False, None
            continue
        if mine and cur is not None:
            f = _FRAME.match(line)
            if f:
                cur.append((f.group(1), int(f.group(2)), f.group(3)))
    return [s for s in out if s]


def classify_frame(sampler, filename: str) -> str:
    """``user`` or ``lib`` for a file named in a dump (the stack sampler's own rule, by path only)."""
    fn = filename.replace(os.sep, "/")
    if fn.startswith(sampler.agent_dir) or "ddpdoctor_capture_agent" in fn:
        return "skip"
    parts = fn.split("/")
    if any(
        p in ("transformers", "accelerate", "lightning", "pytorch_lightning", "lightning_fabric") for p in parts[-4:-1]
    ):
        return "user"
    if fn.startswith("<") or "/site-packages/" in fn or "/dist-packages/" in fn or fn.startswith(sampler._roots):
        return "lib"
    return "user"


def _module_of(sampler, filename: str) -> str:
    fn = filename.replace(os.sep, "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in fn:
            fn = fn.rsplit(marker, 1)[1]
            break
    else:
        for root in sampler._roots:
            if fn.startswith(root):
                fn = fn[len(root) :]
                break
    mod = fn[:-3] if fn.endswith(".py") else fn
    mod = mod.replace("/", ".")
    return mod[:-9] if mod.endswith(".__init__") else mod


def dump_place(sampler, stack: list[tuple[str, int, str]]) -> dict | None:
    """The innermost user frame of one dumped stack and the library function it called."""
    callee = None
    for filename, line, func in stack:
        kind = classify_frame(sampler, filename)
        if kind == "user":
            return {"lib": callee, "func": func, "file": sampler.display_file(filename, ""), "line": line}
        if kind == "lib":
            callee = f"{_module_of(sampler, filename)}.{func}"
    return None


def where_text(p: dict) -> str:
    place = f"{p['func']} ({p['file']}:{p['line']})" if p.get("file") else p["func"]
    return f"{p['lib']} in {place}" if p.get("lib") else place


def call_place(sampler, key, top) -> dict | None:
    """The call a gap ended on: ``key`` is the sampler's first sample after the gap, ``top`` its innermost
    frame's (code, last instruction).  None unless that instruction is a call made under user code."""
    if top is None or not at_call(*top):
        return None
    place = sampler.place_of(key)
    if place is None:
        return None
    if place.get("lib") is None and key[1] is top[0]:  # called from user code itself: a C function
        place["lib"] = callee(*top)
    return place
