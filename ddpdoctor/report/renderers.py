"""The renderers, in one table: each turns the diagnosis document (``ddpdoctor.diagnosis/1`` as a dict,
redacted by :func:`ddpdoctor.report.files.prepare`) into text, and reads nothing else: no rules, no
thresholds, no prediction model (what the analysis decided is in the document, e.g. a fix's
``worth_a_trial``).  So re-rendering a report.json gives the bytes the analysis printed
(tests/test_render_roundtrip.py).  The CLI (``analyze --format``, ``report``), the API's
``Document.render`` and the report folder all render through :data:`RENDERERS`; a new format is one
entry here."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import InputError
from ..text import WIDTH


@dataclass(frozen=True)
class RenderOptions:
    width: int = WIDTH  # terminal: the card's width in columns
    verbose: bool = False  # terminal: the full view (-v), every finding
    report_dir: str | None = None  # terminal: the report folder written beside (the card points to it)
    plots: tuple | None = None  # html: (name, title, png) plots; None: made from the document


@dataclass(frozen=True)
class Renderer:
    name: str  # the --format name
    describe: str
    render: Callable[[dict, RenderOptions], str]


def _public(d: dict) -> dict:
    return {k: v for k, v in d.items() if not k.startswith("_")}


def dumps_json(d: dict) -> str:
    """report.json's text."""
    return json.dumps(_public(d), indent=1, allow_nan=False, default=str) + "\n"


def terminal_lines(d: dict, options: RenderOptions) -> list[str]:
    """The card (``verbose``: the full view) as lines, for a caller that styles them (the CLI on a tty)."""
    from .card import render_card
    from .terminal import render_full

    if options.verbose:
        return render_full(d, options.width, options.report_dir)
    return render_card(d, options.width, report_dir=options.report_dir)


def _terminal(d: dict, options: RenderOptions) -> str:
    return "\n".join(terminal_lines(d, options)) + "\n"


def _markdown(d: dict, options: RenderOptions) -> str:
    from .markdown import render_markdown

    return render_markdown(d)  # without images: it is meant to be pasted


def _html(d: dict, options: RenderOptions) -> str:
    from .html import render_html
    from .plots import make_plots

    return render_html(d, make_plots(d) if options.plots is None else list(options.plots))


def _json(d: dict, options: RenderOptions) -> str:
    return dumps_json(d)


RENDERERS: dict[str, Renderer] = {
    r.name: r
    for r in (
        Renderer("terminal", "the card (-v: the full view), plain text", _terminal),
        Renderer("md", "Markdown to paste into a ticket (no images)", _markdown),
        Renderer("html", "one HTML file, plots inside", _html),
        Renderer("json", "report.json: the document itself", _json),
    )
}


def render(d: dict, fmt: str, options: RenderOptions | None = None) -> str:
    """``d`` in format ``fmt`` (a key of :data:`RENDERERS`)."""
    r = RENDERERS.get(fmt)
    if r is None:
        raise InputError(f"unknown format {fmt!r} (choose from {', '.join(RENDERERS)})")
    return r.render(d, options or RenderOptions())
