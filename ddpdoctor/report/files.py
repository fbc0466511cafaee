"""Turning a diagnosis dict into output: one format as text, a report folder, and loading a
diagnosis back (from report.json, a report folder, a bundle archive, or by analyzing a run).

Every output starts from :func:`prepare`, which applies redaction to the whole dict
before any renderer sees it."""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path

from .. import safe_io
from ..errors import InputError
from ..redact import SecretMemory
from .json_report import SCHEMA
from .redaction import HostRedactor, redact_report
from .renderers import RenderOptions, dumps_json, render

__all__ = ["dumps_json", "render", "prepare", "write_report_dir", "load_diagnosis", "check_report_dir"]


def prepare(
    d: dict, redact_hosts: bool = False, hosts: HostRedactor | None = None, secrets: SecretMemory | None = None
) -> dict:
    """The document every renderer reads: ``d`` redacted (``secrets``: what its analysis remembered)."""
    return redact_report(d, redact_hosts=redact_hosts, hosts=hosts, secrets=secrets)


REPORT_FILES = ("report.md", "report.html", "report.json")


def is_report_dir(out: Path) -> bool:
    """A folder an earlier `--report` wrote: its report.json is a ddpdoctor diagnosis."""
    p = Path(out) / "report.json"
    try:
        with open(p, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return f'"schema": "{SCHEMA}"'.encode() in head


def check_report_dir(out: str | Path, force: bool = False) -> None:
    """Refuse, before any work, a --report folder that would mix with other files: a file, or a non-empty
    folder that is not an earlier report (unless ``force``). An earlier report is replaced whole."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--report {out}: exists and is not a folder")
    if out.is_dir() and not force and any(out.iterdir()) and not is_report_dir(out):
        raise InputError(
            f"--report {out}: the folder is not empty and holds no earlier report; choose another folder or add --force"
        )


def _clear_earlier(out: Path) -> None:
    """Remove what a report writes (report.md/html/json, plots/*.png), so an earlier run's plots do not
    survive beside the new report; any other file is left alone."""
    for name in REPORT_FILES:
        (out / name).unlink(missing_ok=True)
    plots = out / "plots"
    if plots.is_dir():
        for png in plots.glob("*.png"):
            png.unlink(missing_ok=True)


def write_report_dir(d: dict, out: str | Path, force: bool = False) -> list[Path]:
    """report.md, report.html, report.json and plots/*.png in ``out``, replacing an earlier report there
    whole; returns the files."""
    from .markdown import render_markdown
    from .plots import make_plots

    out = Path(out)
    check_report_dir(out, force)
    try:
        if out.is_dir():
            _clear_earlier(out)
        (out / "plots").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--report {out}: cannot create the folder ({exc.strerror or exc})") from None
    plots = make_plots(d)
    written = []
    for name, _, png in plots:
        p = out / "plots" / f"{name}.png"
        p.write_bytes(png)
        written.append(p)
    files = {
        "report.md": render_markdown(d, [(f"plots/{n}.png", t) for n, t, _ in plots]),  # with its images
        "report.html": render(d, "html", RenderOptions(plots=tuple(plots))),
        "report.json": render(d, "json"),
    }
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written


def _check(d, where: str) -> dict:
    return _well_formed(d, where)


def _well_formed(d: dict, where: str) -> dict:
    """A diagnosis read back from a file is untrusted: wrong field types or absurd nesting
    must give one line, not a crash in a renderer.  The typed document (report/document.py)
    names the first wrong field; a trial render covers the open parts (analysis)."""
    from .document import validate
    from .markdown import render_markdown

    validate(d, where)
    _upgrade(d)
    try:
        render_markdown(prepare(d))
    except InputError:
        raise
    except (TypeError, KeyError, AttributeError, ValueError, IndexError, RecursionError, OverflowError) as exc:
        raise InputError(f"{where}: malformed ddpdoctor diagnosis ({type(exc).__name__}: {str(exc)[:120]})") from None
    return d


def _upgrade(d: dict) -> None:
    """A report.json written before fixes carried ``worth_a_trial`` gets it from its stored predictions and the
    shipped [trial] threshold, as the card then decided: here, where a document is read, so that no renderer
    reads a threshold."""
    from ..trial.predict import mark_worth

    mark_worth(d, missing_only=True)


def _read_json(p: Path) -> dict:
    raw = safe_io.read_capped(p, safe_io.max_member_bytes(), "report JSON", "DDPDOCTOR_MAX_MEMBER_BYTES")
    return _check(safe_io.load_json(raw, str(p)), str(p))


def _from_archive(p: Path) -> dict:
    try:
        with tarfile.open(p, "r:*") as tf:
            names = sorted(
                (m for m in tf.getmembers() if m.isfile() and m.name.endswith("report.json")),
                key=lambda m: m.name.count("/"),
            )
            if not names:
                raise InputError(f"{p}: the archive holds no report.json (make one with `ddpdoctor bundle`)")
            cap = safe_io.max_member_bytes()
            if names[0].size > cap:
                raise InputError(
                    f"{p}:{names[0].name}: member larger than the limit of {cap} bytes "
                    f"(raise it with DDPDOCTOR_MAX_MEMBER_BYTES)"
                )
            fh = tf.extractfile(names[0])
            raw = safe_io.read_stream_capped(fh, cap, p)
            return _check(safe_io.load_json(raw, f"{p}:{names[0].name}"), f"{p}:{names[0].name}")
    except (tarfile.TarError, OSError, EOFError, ValueError, zlib.error) as exc:
        raise InputError(f"{p}: not a readable bundle archive ({exc})") from None


def load_diagnosis(path: str, analyze: Callable[[str], dict] | None = None) -> dict:
    """A diagnosis dict from report.json, a folder holding one, a bundle archive, or (given
    ``analyze``, the caller's analysis of a path into a diagnosis dict) a folder of traces / logs.
    A renderer does not run the analysis itself: the pipeline sits below it."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file or folder")
    if not p.is_dir():
        safe_io.check_regular(p)
        if p.name.endswith((".tar.gz", ".tgz", ".tar")):
            return _from_archive(p)
        if (
            p.suffix == ".json"
            and not p.name.endswith(".pt.trace.json")
            and p.stat().st_size <= safe_io.max_member_bytes()
        ):
            raw = safe_io.read_capped(p, safe_io.max_member_bytes(), "report JSON", "DDPDOCTOR_MAX_MEMBER_BYTES")
            head = safe_io.load_json(raw, str(p))
            if isinstance(head, dict) and head.get("schema") == SCHEMA:
                return _well_formed(head, str(p))
            if analyze is None:
                _check(head, str(p))
    elif (p / "report.json").is_file():
        return _read_json(p / "report.json")
    if analyze is None:
        raise InputError(f"{path}: no report.json here (write one with `ddpdoctor analyze … --report DIR`)")
    return analyze(str(p))
