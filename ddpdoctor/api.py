"""The Python API (``import ddpdoctor``): the same analysis as the CLI, returned as objects.

- :func:`analyze` runs the pipeline ``ddpdoctor analyze`` runs (:func:`diagnose`, which both call:
  ``diagnosis.run_analyze`` → ``json_report.to_dict`` → ``files.prepare``) and returns a :class:`Document`;
- :func:`load` reads a diagnosis back (report.json, a report folder, a ``ddpdoctor bundle`` archive);
- :func:`compare` is ``ddpdoctor compare`` (``ticket/compare.py``) and returns a :class:`Comparison`.

Nothing here prints, exits or reads the terminal: errors are exceptions whose ``exit_code`` is the
CLI's for the same problem (``InputError`` 2, ``UnreachableError`` 4, ``FailedRunError`` 3).
Imports are lazy so ``import ddpdoctor`` stays light (no numpy, pandas, matplotlib or torch).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import FailedRunError, InputError

TERMINAL, MARKDOWN, HTML, JSON = "terminal", "markdown", "html", "json"
_FORMATS = {TERMINAL: "terminal", MARKDOWN: "md", "md": "md", HTML: "html", JSON: "json"}  # -> report.renderers


class Document:
    """One diagnosis (schema ``ddpdoctor.diagnosis/1``, docs/diagnosis.schema.json).

    ``to_dict()`` is exactly what report.json holds; ``verdict`` and ``findings`` are the typed
    structs of ``ddpdoctor.report.document`` (``Verdict``, ``Finding``); ``render`` gives the
    terminal card, Markdown or HTML the CLI would write."""

    def __init__(self, data: dict):
        self._data = data
        self._typed = None

    # ------------------------------------------------------------------ typed views
    @property
    def _doc(self):
        if self._typed is None:
            import msgspec

            from .report.document import Diagnosis

            self._typed = msgspec.convert(self.to_dict(), Diagnosis, strict=False)
        return self._typed

    @property
    def verdict(self):
        """``ddpdoctor.report.document.Verdict``: bottleneck, confidence, summary, failed, …"""
        return self._doc.verdict

    @property
    def findings(self) -> list:
        """``ddpdoctor.report.document.Finding`` list, most costly first (each with its ``fixes``)."""
        return list(self._doc.findings)

    @property
    def failed(self) -> bool:
        """The run itself failed (a crash, an OOM, a timeout), as found in its logs or bundle."""
        return bool(self.verdict.failed)

    @property
    def exit_code(self) -> int:
        """What ``ddpdoctor analyze`` exits with for this diagnosis: 3 for a failed run, else 0."""
        from .errors import FAILED_RUN

        return FAILED_RUN if self.failed else 0

    # ------------------------------------------------------------------ output
    def to_dict(self) -> dict:
        """The document as report.json holds it (a new dict each call)."""
        from .report.files import dumps_json

        return json.loads(dumps_json(self._data))

    def to_json(self) -> str:
        """report.json's text."""
        from .report.files import dumps_json

        return dumps_json(self._data)

    def render(self, fmt: str = TERMINAL, *, verbose: bool = False, width: int = 80) -> str:
        """``"terminal"`` (the card; ``verbose``: every finding), ``"markdown"``, ``"html"`` or ``"json"``."""
        if fmt not in _FORMATS:
            raise InputError(f"unknown format {fmt!r} (choose from terminal, markdown, html, json)")
        from .report.renderers import RenderOptions, render

        return render(self._data, _FORMATS[fmt], RenderOptions(width=max(40, int(width)), verbose=verbose))

    def write_report(self, folder: str | os.PathLike) -> list[str]:
        """report.md, report.html, report.json and plots/*.png in ``folder`` (``analyze --report``)."""
        from .report.files import write_report_dir

        return [str(p) for p in write_report_dir(self._data, os.fspath(folder))]

    def raise_for_failure(self) -> Document:
        """Raise :class:`FailedRunError` when the run failed (``analyze``'s exit code 3); else return self."""
        if self.failed:
            raise FailedRunError(self)
        return self

    def __repr__(self) -> str:
        v = self._data.get("verdict") or {}
        return (
            f"<ddpdoctor.Document {v.get('label') or v.get('bottleneck') or 'no bottleneck'}: "
            f"{len(self._data.get('findings') or [])} findings>"
        )


class Comparison:
    """``ddpdoctor compare``'s result (schema ``ddpdoctor.compare/1``)."""

    def __init__(self, data: dict):
        self._data = data

    speedup = property(lambda self: self._data.get("speedup"), doc="median step time before / after")
    step_time_change_pct = property(lambda self: self._data.get("step_time_change_pct"))
    regressed = property(
        lambda self: bool(self._data.get("regressed")),
        doc="the step time grew by more than max_regression percent (the CLI exits 1)",
    )
    verdict_moved = property(lambda self: bool(self._data.get("verdict_moved")))

    def to_dict(self) -> dict:
        return json.loads(json.dumps(self._data, default=str))

    def render(self, fmt: str = "terminal") -> str:
        """``"terminal"`` (or ``"text"``), ``"markdown"`` (or ``"md"``) or ``"json"``: the names
        ``Document.render`` and the CLI's ``--format`` use."""
        from .ticket.compare import render

        fmt = {"markdown": "md", "text": "terminal"}.get(fmt, fmt)
        if fmt not in ("terminal", "md", "json"):
            raise InputError(f"unknown format {fmt!r} (choose from terminal, markdown, json)")
        return render(self._data, fmt)

    def __repr__(self) -> str:
        s = self.speedup
        return f"<ddpdoctor.Comparison {'speed-up ' + format(s, '.2f') + 'x' if s else 'no step times'}>"


# ---------------------------------------------------------------------- entry points


def analyzer(opts, context, progress=None):
    """The analysis of one path into a diagnosis dict, for report.files.load_diagnosis (a renderer
    does not run the pipeline below it: the CLI and this API hand it this function).  ``context``: the
    AnalysisContext of that analysis (its secrets are the caller's to hand to ``prepare``)."""
    from .diagnosis import run_analyze
    from .report.json_report import to_dict

    return lambda path: to_dict(run_analyze([path], opts, context, progress=progress), context.thresholds)


def analyze(
    paths,
    *,
    all_windows: bool = False,
    jobs: int | None = None,
    ranks: str | None = None,
    scheduler: str | None = None,
    comm_kernels: Iterable[str] = (),
    hta: str = "auto",
    rules: Iterable[str | os.PathLike] = (),
    overrides: Mapping[str, Any] | Iterable[str] = (),
    use_config: bool = True,
    redact_hosts: bool = False,
    check: bool = False,
) -> Document:
    """Diagnose a run, as ``ddpdoctor analyze PATHS`` does, and return the :class:`Document`.

    ``paths``: one path or a list (a ``ddpdoctor run`` bundle, trace files or folders, logs, fsspec
    URLs).  The options are the CLI's: ``all_windows`` (--all-windows), ``jobs`` (-j), ``ranks``
    (--ranks "0-7,12"), ``scheduler`` (--scheduler), ``comm_kernels`` (--comm-kernel regexes), ``hta``
    ("auto", "on", "off"), ``rules`` (--rules folders), ``overrides`` ({"RULE.PARAM": 0.2} or
    ["RULE.PARAM=0.2"], --set: a rule id and one of its parameters, see ``ddpdoctor rules explain RULE``), ``use_config`` (False: --no-config), ``redact_hosts``.
    ``check=True`` raises :class:`FailedRunError` (exit code 3) when the run itself failed; by
    default a failed run is a diagnosis like any other (``doc.failed``)."""
    paths = _paths(paths)
    check_patterns(comm_kernels, "comm_kernels")
    if hta not in ("auto", "on", "off"):
        raise InputError(f"hta={hta!r}: choose from auto, on, off")
    with _translated_errors():
        from .analysis import AnalyzeOptions

        context = _context(rules, overrides, use_config)  # this call's own: nothing shared with another
        opts = AnalyzeOptions(
            all_windows=all_windows,
            jobs=jobs,
            comm_patterns=tuple(comm_kernels),
            hta=hta,
            scheduler=scheduler,
            ranks=ranks,
        )
        doc = Document(diagnose(paths, opts, context, redact_hosts=redact_hosts))
    return doc.raise_for_failure() if check else doc


def diagnose(
    paths: list[str],
    opts,
    context,
    *,
    redact_hosts: bool = False,
    quiet: bool = True,
    progress: Callable[[], contextlib.AbstractContextManager] | None = None,
) -> dict:
    """The pipeline of ``ddpdoctor analyze`` and :func:`analyze`, once: the HTA check, a `run --try` folder read
    as its baseline arm, ``diagnosis.run_analyze`` with ``context`` (an AnalysisContext), the document built
    with the context's thresholds (``json_report.to_dict``) and redacted with its secrets (``files.prepare``).
    ``quiet``: no note on stderr about a trial folder; ``progress``: a context manager factory yielding the
    per-rank tick (the CLI's display on a terminal)."""
    from .diagnosis import run_analyze
    from .metrics import hta_adapter
    from .report.files import prepare
    from .report.json_report import to_dict
    from .report.redaction import HostRedactor
    from .trial.folders import trial_arm

    hta_adapter.require(opts.hta)
    paths, trial = trial_arm(list(paths), quiet=quiet)
    with progress() if progress is not None else contextlib.nullcontext(None) as tick:
        report = run_analyze(paths, opts, context, progress=tick)
    raw = to_dict(report, context.thresholds)
    if trial is not None:
        raw["trial"] = trial  # redacted with the rest (the trial's paths and command line)
    return prepare(raw, redact_hosts, HostRedactor() if redact_hosts else None, context.secrets)


def check_patterns(patterns: Iterable[str], name: str) -> None:
    """Each --comm-kernel pattern (``name``: how the caller calls them) is a valid regular expression."""
    import re

    for p in patterns:
        try:
            re.compile(p)
        except re.error as exc:
            raise InputError(f"{name} {p!r} is not a valid regular expression ({exc})") from None


def load(source: str | os.PathLike) -> Document:
    """A diagnosis read back without the traces (``ddpdoctor report SOURCE``): a report.json, a report
    folder, or the .tar.gz archive ``ddpdoctor bundle`` writes.  Never analyzes."""
    with _translated_errors():
        from .report.files import load_diagnosis, prepare

        return Document(prepare(load_diagnosis(os.fspath(source))))


def compare(before, after, *, max_regression: float | None = None, hta: str = "off") -> Comparison:
    """Before/after (``ddpdoctor compare BEFORE AFTER``): each side a :class:`Document`, a diagnosis
    dict, or a path (report.json, report folder, bundle archive, or a run folder analyzed on the fly)."""
    with _translated_errors():
        from .analysis import AnalyzeOptions
        from .report.document import validate
        from .report.files import load_diagnosis, prepare
        from .ticket import compare as cmp

        def side(x, name):
            if isinstance(x, Document):
                return x._data
            if isinstance(x, Mapping):
                return prepare(validate(dict(x), name))
            context = _context((), (), True)  # each side analyzed on the fly is its own analysis
            return prepare(
                load_diagnosis(os.fspath(x), analyzer(AnalyzeOptions(hta=hta), context)), secrets=context.secrets
            )

        return Comparison(cmp.compare(side(before, "before"), side(after, "after"), max_regression=max_regression))


# ---------------------------------------------------------------------- helpers


def _paths(paths) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    try:
        out = [os.fspath(p) for p in paths]
    except TypeError:
        raise InputError("paths: give a path or a list of paths") from None
    if not out:
        raise InputError("paths: nothing to analyze (an empty list)")
    return out


def _context(rules, overrides, use_config):
    """A new AnalysisContext for one call: the rule set (``rules`` folders, ``overrides``, config files),
    its thresholds and an empty secrets memory."""
    from .diagnosis import AnalysisContext

    if isinstance(overrides, Mapping):
        sets = [f"{k}={v}" for k, v in overrides.items()]
    elif isinstance(overrides, str):
        sets = [overrides]
    else:
        sets = list(overrides)
    rules = [os.fspath(r) for r in ([rules] if isinstance(rules, (str, os.PathLike)) else rules)]
    return AnalysisContext.build(rules, sets, use_config=use_config)


@contextlib.contextmanager
def _translated_errors():
    """The errors the CLI turns into exit code 2 arrive here as InputError (the CLI's meaning: errors.as_input_error,
    the one translation both use)."""
    from .errors import as_input_error

    try:
        yield
    except InputError:
        raise
    except Exception as exc:
        translated = as_input_error(exc)
        if translated is None:
            raise
        raise translated from None
