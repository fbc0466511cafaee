"""Local paths in a report, made readable by someone on another machine: a path inside an input folder
is written relative to that input (``run1/ranks/rank0/events.jsonl:8``, the input named by its own
folder name), and an interpreter's absolute path (a local virtualenv's ``…/bin/python3.11``) as its
name alone. Everything else is left as it is (the JSON keeps the full paths)."""

from __future__ import annotations

import os
import re
from pathlib import PurePath

_INTERPRETER = re.compile(r"(?<![\w.-])/(?:[^\s/:'\"|]+/)*bin/(python[0-9.]*|torchrun)\b")


def _prefixes(inputs: list) -> list[tuple[str, str]]:
    """(an input's path as the documents may hold it, its folder name), longest first."""
    out = set()
    for raw in inputs or []:
        s = str(raw).rstrip("/")
        if not s or "://" in s:
            continue
        name = PurePath(s).name
        if not name or name in (".", ".."):
            continue
        for form in (s, os.path.abspath(s)):
            if form != name:
                out.add((form, name))
    return sorted(out, key=lambda p: -len(p[0]))


def localize(text, inputs: list) -> str:
    """``text`` with the paths under an input folder relative to it and interpreter paths shortened."""
    s = "" if text is None else str(text)
    for form, name in _prefixes(inputs):
        s = s.replace(form, name)
    return _INTERPRETER.sub(lambda m: m.group(1), s)


def localize_doc(d: dict) -> dict:
    """A copy of a diagnosis document with :func:`localize` applied to every string in it."""
    inputs = list(d.get("inputs") or [])
    if not inputs:
        return d

    def walk(x):
        if isinstance(x, str):
            return localize(x, inputs)
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(d)
