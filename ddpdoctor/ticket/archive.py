"""``ddpdoctor bundle DIR -o ticket.tar.gz``: one archive to attach to a bug ticket.

Contents, in order of priority (the size budget is filled in this order):

1. the report (report.md, report.html, report.json, plots/*.png) and facts.json;
2. the run's records: manifest.json, hosts/*.json, ranks/*/settings.json (JSON re-written
   with secrets redacted);
3. logs (*.log, *.txt, *.out, *.err, *.jsonl, NCCL debug files), line by line redacted;
   a log over budget keeps its head and tail;
4. traces (``--with-traces``), rank 0 and stragglers first; ``--trim-traces`` keeps only the
   profiled steps' events (then the last two steps, then one) and a trace still over budget
   is dropped with a note.

Files that look like secrets (.env, keys, certificates, .netrc, credential files, …) and
hidden folders (.git, .ssh, .aws, …) are never included.  BUNDLE.md inside the archive lists
what is in it, what was left out and why.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import tarfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .. import safe_io
from ..errors import InputError
from ..redact import SecretMemory, redact_known_formats, strip_terminal
from ..report.redaction import HostRedactor, redact_secrets, redact_string
from ..text import plural

TOP = "ddpdoctor-ticket"
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".jsonl")
RECORD_NAMES = ("manifest.json", "settings.json")
SECRET_FILE = re.compile(
    r"(?i)^(\.env(\..*)?|.*\.env|\.netrc|_netrc|\.pgpass|\.pypirc|\.npmrc|\.git-credentials|\.htpasswd|"
    r"id_(rsa|dsa|ecdsa|ed25519)(\.pub)?|.*\.(pem|key|p12|pfx|jks|keystore|kdbx|keytab|gpg|asc|ppk)|"
    r"kubeconfig|(.*[._-])?(credentials?|secrets?|tokens?|passw(or)?ds?|api[_-]?keys?|auth)([._-].*)?)$"
)
HIDDEN_OK = {".ddpdoctor"}
MAX_LOG_KEEP_LINES = 4000


@dataclass
class Member:
    name: str
    data: bytes
    kind: str

    @property
    def cost(self) -> int:  # compressed size estimate inside the tar.gz
        if self.data[:2] == b"\x1f\x8b" or self.name.endswith(".png"):
            return len(self.data) + 512
        return len(zlib.compress(self.data, 6)) + 512


@dataclass
class BundleResult:
    path: Path
    members: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    size: int = 0


def looks_secret(path: Path) -> bool:
    return bool(SECRET_FILE.match(path.name)) and not path.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))


def bundle_files(src: Path, left_out: list[str] | None = None) -> list[Path]:
    """Regular files under ``src`` whose real path stays inside it (links out of the folder,
    FIFOs, sockets, devices, loops and dangling links are left out, and said)."""
    if not src.is_dir():
        safe_io.check_regular(src)
        return [src]
    top = src.resolve()
    out = []
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") or d in HIDDEN_OK)
        for f in sorted(files):
            p = Path(root) / f
            try:
                safe_io.check_regular(p)
                inside = p.resolve().is_relative_to(top)
            except (InputError, OSError, RuntimeError) as exc:
                if left_out is not None:
                    left_out.append(redact_known_formats(f"{exc}"))
                continue
            if not inside:
                if left_out is not None:
                    left_out.append(redact_known_formats(f"{p}: a link to outside the folder (never followed)"))
                continue
            out.append(p)
    return out


def _read(p: Path, res: "BundleResult", name: str) -> bytes | None:
    try:
        return safe_io.read_capped(p, safe_io.max_member_bytes(), "file", "DDPDOCTOR_MAX_MEMBER_BYTES")
    except InputError as exc:
        res.left_out.append(f"{name}: left out ({str(exc).split(': ', 1)[-1]})")
        return None


def _is_trace(p: Path) -> bool:
    if not p.name.endswith((".json", ".json.gz")):
        return False
    from ..bundle.discover import peek

    try:
        head, _ = peek(p)
    except (InputError, OSError):
        return False
    return b'"traceEvents"' in head or b'"schemaVersion"' in head


def _load_json_bytes(data: bytes):
    import msgspec

    raw = safe_io.gunzip_capped(data, "trace", safe_io.max_trace_bytes()) if data[:2] == b"\x1f\x8b" else data
    return msgspec.json.decode(raw)


def trim_trace(data: bytes, keep_steps: int | None = None) -> bytes | None:
    """The trace with only the events of its ProfilerStep windows (the last ``keep_steps``
    of them when given), gzipped; None when the trace has no steps to trim to."""
    import msgspec

    try:
        obj = _load_json_bytes(data)
    except (ValueError, OSError, msgspec.DecodeError, InputError, RecursionError):
        return None
    evs = obj.get("traceEvents") if isinstance(obj, dict) else None
    if not isinstance(evs, list):
        return None
    steps = sorted(
        (e["ts"], e["ts"] + (e.get("dur") or 0))
        for e in evs
        if isinstance(e, dict)
        and str(e.get("name", "")).startswith("ProfilerStep#")
        and isinstance(e.get("ts"), (int, float))
    )
    if not steps:
        return None
    if keep_steps:
        steps = steps[-keep_steps:]
    lo, hi = steps[0][0], max(e for _, e in steps)
    hi_gpu = hi + 0.5 * (hi - lo) / len(steps)  # GPU work launched in the last step ends later

    def keep(e) -> bool:
        if not isinstance(e, dict) or e.get("ph") == "M" or not isinstance(e.get("ts"), (int, float)):
            return True
        ts = e["ts"]
        return lo <= ts <= hi_gpu or (ts < lo and ts + (e.get("dur") or 0) > lo)

    obj["traceEvents"] = [e for e in evs if keep(e)]
    return gzip.compress(msgspec.json.encode(obj), 6, mtime=0)


def _redact_json_file(data: bytes, hosts: HostRedactor | None, secrets: SecretMemory) -> bytes:
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _redact_text_file(data, hosts, secrets)
    obj = redact_secrets(obj, known=secrets)
    if hosts is not None:
        obj = hosts.apply(obj)
    return (json.dumps(obj, indent=1, default=str) + "\n").encode("utf-8")


def _redact_text_file(data: bytes, hosts: HostRedactor | None, secrets: SecretMemory) -> bytes:
    text = data.decode("utf-8", errors="replace")
    out = redact_string(text, secrets)  # whole text: a PEM block spans lines
    return (hosts.sub(out) if hosts is not None else out).encode("utf-8")


def _head_tail(data: bytes, keep: int) -> bytes:
    lines = data.splitlines(keepends=True)
    if len(lines) <= keep:
        return data
    half = keep // 2
    return b"".join(
        lines[:half]
        + [f"\n… {len(lines) - keep} lines left out by ddpdoctor bundle (size budget) …\n\n".encode()]
        + lines[-half:]
    )


def hosts_from_records(files: list[Path], hosts: HostRedactor) -> None:
    names = []
    for p in files:
        if p.name == "manifest.json" or (p.suffix == ".json" and p.parent.name == "hosts"):
            if p.parent.name == "hosts":
                names.append(p.stem)
            try:
                obj = safe_io.load_json(safe_io.read_capped(p, safe_io.max_member_bytes()), str(p))
            except (OSError, InputError):
                continue
            if isinstance(obj, dict):
                names += [obj.get("hostname")] + [x for x in obj.get("hosts") or [] if isinstance(x, str)]
    hosts.add_hosts(names)


def _trace_order(d: dict, traces: list[Path]) -> list[Path]:
    """Rank 0, the stragglers and the slowest rank first."""
    strag = {int(s["rank"]) for s in ((d.get("analysis") or {}).get("cross_rank") or {}).get("stragglers") or []}
    from ..bundle.discover import rank_from_name

    def key(p: Path):
        r = rank_from_name(p)
        return (0 if r == 0 else 1 if r in strag else 2, r if r is not None else 1 << 30, str(p))

    return sorted(traces, key=key)


def build_bundle(
    src: str | Path,
    out: str | Path,
    d: dict,
    max_mb: float = 25.0,
    with_traces: bool = True,
    trim_traces: bool = False,
    hosts: HostRedactor | None = None,
    secrets: SecretMemory | None = None,
) -> BundleResult:
    """Write the archive; ``d`` is the (already redacted) diagnosis dict of the run; ``secrets``: the values its
    analysis remembered as secret (the run's files add theirs), hidden in every member."""
    from ..report.files import dumps_json
    from ..report.html import render_html
    from ..report.markdown import render_markdown
    from ..report.plots import make_plots

    src, out = Path(src), Path(out)
    budget = int(max_mb * 1024 * 1024)
    res = BundleResult(out)
    walk_notes: list[str] = []
    files = [p for p in bundle_files(src, walk_notes) if p.resolve() != out.resolve()]
    if hosts is not None:
        hosts_from_records(files, hosts)
    secrets = SecretMemory() if secrets is None else secrets
    _collect_file_secrets(files, secrets)
    plots = make_plots(d)
    members = [
        Member("report.md", render_markdown(d, [(f"plots/{n}.png", t) for n, t, _ in plots]).encode(), "report"),
        Member("report.html", render_html(d, plots).encode(), "report"),
        Member("report.json", dumps_json(d).encode(), "report"),
        Member("facts.json", (json.dumps(d.get("facts") or {}, indent=1, default=str) + "\n").encode(), "report"),
    ]
    members += [Member(f"plots/{n}.png", png, "report") for n, _, png in plots]
    used = sum(m.cost for m in members)
    chosen = list(members)

    def rel(p: Path) -> str:
        r = p.relative_to(src).as_posix() if src.is_dir() else p.name
        r = redact_known_formats(strip_terminal(f"run/{r}"), secrets)  # secrets in file names too
        return hosts.sub(r) if hosts is not None else r

    def add(m: Member) -> bool:
        nonlocal used
        if used + m.cost > budget:
            return False
        chosen.append(m)
        used += m.cost
        return True

    res.left_out += walk_notes
    records, logs, traces = [], [], []
    for p in files:
        if looks_secret(p):
            res.left_out.append(f"{rel(p)}: looks like a secret (never included)")
        elif p.name in RECORD_NAMES or (p.suffix == ".json" and p.parent.name == "hosts"):
            records.append(p)
        elif p.name.endswith(LOG_SUFFIXES) or "nccl" in p.name.lower():
            logs.append(p)
        elif _is_trace(p):
            traces.append(p)
        elif p.name not in ("report.md", "report.html", "report.json") and p.parent.name != "plots":
            res.left_out.append(f"{rel(p)}: not a record, log or trace")
    for p in records:
        raw = _read(p, res, rel(p))
        if raw is None:
            continue
        if not add(Member(rel(p), _redact_json_file(raw, hosts, secrets), "record")):
            res.left_out.append(f"{rel(p)}: over the size budget")
    for p in logs:
        try:
            data = _redact_text_file(safe_io.read_log_text(p, res.left_out).encode("utf-8"), hosts, secrets)
        except InputError as exc:
            res.left_out.append(f"{rel(p)}: left out ({str(exc).split(': ', 1)[-1]})")
            continue
        if add(Member(rel(p), data, "log")):
            continue
        if add(Member(rel(p), _head_tail(data, MAX_LOG_KEEP_LINES), "log")):
            res.left_out.append(f"{rel(p)}: middle cut (head and tail kept) to fit the size budget")
        else:
            res.left_out.append(f"{rel(p)}: over the size budget")
    if not with_traces:
        res.left_out += [f"{rel(p)}: traces not included (--no-traces)" for p in traces]
    else:
        for p in _trace_order(d, traces):
            name = rel(p)
            data = _read(p, res, name)
            if data is None:
                continue
            data = _trace_secrets(data, p, secrets)
            _add_trace(name, data, res, add, hosts, trim_traces)
    res.members = [m.name for m in chosen]
    index = _index(res, d, budget, hosts is not None)
    chosen.insert(0, Member("BUNDLE.md", index.encode(), "index"))
    res.members.insert(0, "BUNDLE.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(tmp, "w:gz", compresslevel=6) as tf:
        now = int(time.time())
        for m in chosen:
            info = tarfile.TarInfo(f"{TOP}/{m.name}")
            info.size, info.mtime, info.mode = len(m.data), now, 0o644
            tf.addfile(info, io.BytesIO(m.data))
    os.replace(tmp, out)
    res.size = out.stat().st_size
    return res


def _add_trace(name: str, data: bytes, res: BundleResult, add, hosts: HostRedactor | None, trim_traces: bool) -> None:
    """Add one trace whole, else trimmed to fewer steps, else note it dropped (``add`` keeps to the budget)."""
    tried = []
    if not trim_traces and add(Member(name, _host_trace(data, hosts), "trace")):
        return
    ok = False
    for steps in (None, 2, 1):
        t = trim_trace(data, steps)
        if t is None:
            break
        tname = re.sub(r"(\.json)(\.gz)?$", r"\1.gz", name)
        if add(Member(tname, _host_trace(t, hosts), "trace")):
            ok = True
            if not trim_traces or steps:
                kept = "the last " + plural(steps, "step") if steps else "the profiled steps"
                res.left_out.append(f"{name}: trimmed to {kept} to fit the size budget")
            break
        tried.append(steps)
    if not ok:
        res.left_out.append(
            f"{name}: dropped, over the size budget even trimmed"
            if tried
            else f"{name}: dropped, over the size budget (no steps to trim it to)"
        )


def _collect_file_secrets(files: list[Path], secrets: SecretMemory) -> None:
    """Secret values named in the run's records and logs (env, argv, `--api-key X` echoed by
    the script), remembered before any member is written so they are hidden everywhere."""
    for p in files:
        if p.name.endswith(LOG_SUFFIXES) or p.name in RECORD_NAMES or p.suffix == ".json" and p.parent.name == "hosts":
            try:
                text = safe_io.read_log_text(p)
            except (InputError, OSError):
                continue
            secrets.collect(text)
            if p.suffix == ".json":
                try:
                    secrets.collect(json.loads(text))
                except (ValueError, RecursionError):
                    pass


def _trace_secrets(data: bytes, path: Path, secrets: SecretMemory) -> bytes:
    """A trace with known credential formats (and values known to be secret) removed; the
    bytes are kept as they are when there is nothing to remove."""
    try:
        raw = safe_io.gunzip_capped(data, path, safe_io.max_trace_bytes()) if data[:2] == b"\x1f\x8b" else data
    except InputError:
        return data
    text = raw.decode("utf-8", errors="replace")
    clean = redact_known_formats(text, secrets)
    if clean == text:
        return data
    out = clean.encode("utf-8")
    return gzip.compress(out, 6, mtime=0) if data[:2] == b"\x1f\x8b" else out


def _host_trace(data: bytes, hosts: HostRedactor | None) -> bytes:
    if hosts is None:
        return data
    gz = data[:2] == b"\x1f\x8b"
    text = (safe_io.gunzip_capped(data, "trace", safe_io.max_trace_bytes()) if gz else data).decode(
        "utf-8", errors="replace"
    )
    out = hosts.sub(text).encode("utf-8")
    return gzip.compress(out, 6, mtime=0) if gz else out


def _index(res: BundleResult, d: dict, budget: int, hosts: bool) -> str:
    from ..report import view
    from ..report.escape import md

    lines = [
        "# ddpdoctor bundle",
        "",
        f"Verdict: {md(view.headline(d))}",
        "",
        f"Size budget: {budget / 1024 / 1024:.1f} MiB. Secrets redacted"
        + ("; host names and IP addresses replaced by placeholders." if hosts else "."),
        "",
        "## Contents",
        "",
    ]
    lines += [f"- {md(m)}" for m in res.members]
    if res.left_out:
        lines += ["", "## Left out or cut", ""] + [f"- {md(x)}" for x in res.left_out]
    return "\n".join(lines) + "\n"
