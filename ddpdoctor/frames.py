"""Whose code a stack frame is: ddpdoctor's own (the capture agent injected into the ranks, its DataLoader and
optimizer patches), torch's, the standard library's, or the user's. A place the analysis names (where a rank
hung, where an exception was raised, where the sampler found extra work) is always the user's: the tool's own
frames are never shown as one.

The agent runs from a copy loaded as the package ``ddpdoctor_capture_agent`` (``…/inject/ddpdoctor_capture_agent/``)
or, in a source checkout, from ``ddpdoctor/capture/``.
"""

from __future__ import annotations

TOOL_PARTS = ("/ddpdoctor_capture_agent/", "/ddpdoctor/capture/")
DATALOADER_FILE = "/torch/utils/data/dataloader.py"


def _norm(path) -> str:
    return str(path or "").replace("\\", "/")


def is_tool_frame(path) -> bool:
    """The frame is ddpdoctor's own code (the capture agent and its patches)."""
    p = _norm(path)
    return any(part in p for part in TOOL_PARTS)


def is_dataloader_next(path, function) -> bool:
    """The frame is the DataLoader iterator's ``__next__`` (the user's ``next(loader)`` / ``for batch in loader``)."""
    return _norm(path).endswith(DATALOADER_FILE) and function == "__next__"
