"""Part of the capture agent (standard library only): torch's warnings about a setting ddpdoctor chose
(a `run --try` / `tune` arm's override, overrides.py) go to the rank's log in the bundle, not the terminal.

``DataLoader(num_workers=8)`` makes torch warn "This DataLoader will create 8 worker processes …" each
time an iterator starts.  When the 8 is ddpdoctor's (``dataloader.num_workers`` in the trial record's
``applied``, with that same number in the message), the warning is written to the rank's ``output.log``
only; the same warning about a value the user chose, and every other warning, reaches the terminal as
before (the previous ``warnings.showwarning``).
"""

from __future__ import annotations

import os
import re
import warnings

# knob -> (category, pattern whose group 1 is the value the warning is about)
ABOUT_KNOB = {
    "dataloader.num_workers": (UserWarning, re.compile(r"This DataLoader will create (\d+) worker processes")),
}


def chosen_by_ddpdoctor(message, category, applied: dict) -> str | None:
    """The knob this warning is about when ddpdoctor set it to the value the warning names; else None."""
    text = str(message)
    for knob, (cat, pattern) in ABOUT_KNOB.items():
        rec = applied.get(knob)
        if rec is None or not issubclass(category, cat):
            continue
        m = pattern.search(text)
        if m and m.group(1) == str(rec.get("to")):
            return knob
    return None


class WarningRouter:
    """A ``warnings.showwarning`` that sends warnings about ddpdoctor's own settings to ``log_path``."""

    def __init__(self, applied: dict, log_path: str, previous=None):
        self.applied, self.log_path = applied, log_path
        self.previous = previous or warnings.showwarning
        self.routed = 0

    def __call__(self, message, category, filename, lineno, file=None, line=None):
        knob = chosen_by_ddpdoctor(message, category, self.applied) if file is None else None
        if knob is None:
            return self.previous(message, category, filename, lineno, file, line)
        text = warnings.formatwarning(message, category, filename, lineno, line)
        note = f"[ddpdoctor: kept off the terminal; {knob} is the setting ddpdoctor tried]\n"
        try:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, (note + text).encode("utf-8", "replace"))
            finally:
                os.close(fd)
            self.routed += 1
        except OSError:  # the log cannot take it: the terminal still gets it
            self.previous(message, category, filename, lineno, file, line)


def install(applied: dict, log_path: str) -> WarningRouter:
    router = WarningRouter(applied, log_path)
    warnings.showwarning = router
    return router
