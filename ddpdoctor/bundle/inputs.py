"""One discovery pass over the user's paths, shared by every stage.

``analyze`` reads three kinds of file from the same folders: traces (bundle/discover.py), logs
(logs/discover.py) and bundle records (bundle/settings.py).  Each used to walk the folders on its
own; now the first walk of a folder is kept in an :class:`Inputs` and the others read it, each
with its own filter (the log finder prunes .git, .venv, … as before).  A stage given no Inputs
walks the folder itself, as a library call or a unit test does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

Walk = list[tuple[str, list[str], list[str]]]  # os.walk's (root, dirs, files), dirs and files sorted


@dataclass
class Inputs:
    paths: list[str]
    _walks: dict[str, Walk] = field(default_factory=dict)
    walks_done: int = 0  # how many folders were walked on disk (one per given folder)

    def walk(
        self, folder: Path | str, skip: frozenset[str] | set[str] = frozenset()
    ) -> Iterator[tuple[str, list[str], list[str]]]:
        """os.walk of ``folder`` (sorted), from the one walk kept for it; folders named in ``skip``
        and everything under them are left out."""
        key = os.fspath(folder)
        if key not in self._walks:
            self._walks[key] = walk_sorted(key)
            self.walks_done += 1
        skipped: list[str] = []
        for root, dirs, files in self._walks[key]:
            if any(root == s or root.startswith(s + os.sep) for s in skipped):
                continue
            keep = [d for d in dirs if d not in skip]
            skipped += [os.path.join(root, d) for d in dirs if d in skip]
            yield root, keep, files


def walk_sorted(folder: str) -> Walk:
    out: Walk = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        out.append((root, list(dirs), sorted(files)))
    return out


def walk(folder: Path | str, inputs: Inputs | None = None, skip=frozenset()):
    """The walk of ``folder``: from ``inputs`` when a pass is shared, else a fresh one."""
    return (inputs or Inputs([])).walk(folder, skip)
