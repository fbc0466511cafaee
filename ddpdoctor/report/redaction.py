"""Redaction applied to everything a report, a bundle or ``compare`` writes.

* **Secrets** (always): values of secret-named keys (``HF_TOKEN``, ``MY_API_KEY``, …),
  credentials in command lines (``--hf-token X``, ``--api-key=X``, ``--password X``), URL
  passwords and credential-looking values.  The patterns live in :mod:`ddpdoctor.redact`
  (shared with ``ddpdoctor run``).
* **Hosts** (``--redact-hosts``): host names and IP addresses become ``host-1``, ``ip-1``, …
  consistently: one :class:`HostRedactor` maps the same host to the same placeholder in
  every file it touches (host names are numbered in sorted order, so two runs of the same
  command on the same report agree).
"""

from __future__ import annotations

import copy
import re

from ..redact import REDACTED, SecretMemory, redact_known_formats, redact_text, secret_name, strip_terminal

# `--name value` / `--name=value` inside a command line held as one string
_OPTION = re.compile(r"(?<![\w\-])(--?[A-Za-z][A-Za-z0-9_\-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|[^\s\"']+)")


def redact_string(text: str, known: SecretMemory | None = None) -> str:
    """One string with credentials removed (command-line options with secret names too, and the values
    ``known`` remembers)."""
    if not text:
        return text

    def opt(m: re.Match) -> str:
        if secret_name(m.group(1).lstrip("-")) and not m.group(3).startswith("-"):
            return f"{m.group(1)}{m.group(2)}{REDACTED}"
        return m.group(0)

    return redact_text(_OPTION.sub(opt, text), known)


def redact_secrets(obj, _key: str | None = None, lenient: bool = False, known: SecretMemory | None = None):
    """A copy of a JSON-like object with secrets removed: the value of a secret-named key
    (and everything under it) is replaced, every other string is scanned (``lenient``: for
    known credential formats only, as for kernel names and paths from traces; ``known``: the
    values an analysis remembered as secret, hidden wherever they appear)."""
    if _key is not None and secret_name(_key) and obj not in (None, "", [], {}):
        if isinstance(obj, str):  # numbers under such names (token counts) are not secrets
            return REDACTED
        if isinstance(obj, list) and all(isinstance(x, str) for x in obj):
            return [REDACTED for _ in obj]
    if isinstance(obj, str):
        obj = strip_terminal(obj)
        return redact_known_formats(obj, known) if lenient else redact_string(obj, known)
    if isinstance(obj, dict):
        return {
            (redact_known_formats(strip_terminal(k), known) if isinstance(k, str) else k): redact_secrets(
                v, str(k), lenient, known
            )
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        if not lenient and obj and all(isinstance(x, str) for x in obj):  # an argv: `--hf-token`, `X`
            return _redact_argv_list(list(obj), known)
        return [redact_secrets(v, None, lenient, known) for v in obj]
    return obj


def _redact_argv_list(argv: list[str], known: SecretMemory | None) -> list[str]:
    out, hide = [], False
    for a in argv:
        if hide:
            out.append(REDACTED)
            hide = False
            continue
        if a.startswith("-") and "=" not in a and secret_name(a.lstrip("-")) and len(a) > 2:
            hide = True
        out.append(redact_string(a, known))
    return out


_IPV4 = re.compile(r"(?<![\d.])(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}(?![\d.])")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_NOT_HOSTS = {"", "localhost", "none", "null", "unknown"}
_KEEP_IPS = {"0.0.0.0", "127.0.0.1"}


def _v6(s: str) -> bool:
    return (s.count(":") >= 3 or "::" in s) and any(c.isdigit() for c in s) and s.strip(":") != ""


class HostRedactor:
    """Consistent placeholders for host names and IP addresses."""

    def __init__(self, hosts=()):
        self.hosts: dict[str, str] = {}
        self.ips: dict[str, str] = {}
        self._n = 0
        self.add_hosts(hosts)

    def add_hosts(self, names) -> None:
        new = sorted(
            {str(n).strip() for n in names if n and str(n).strip().lower() not in _NOT_HOSTS} - set(self.hosts)
        )
        for n in new:
            self._n += 1
            self.hosts[n] = f"host-{self._n}"
            short = n.split(".")[0]
            if short != n and short not in self.hosts and len(short) >= 3:
                self.hosts[short] = self.hosts[n]

    def collect(self, d: dict) -> HostRedactor:
        """Host names a diagnosis dict knows of (trace hosts, bundle host facts)."""
        found = []
        facts = d.get("facts") or {}
        for k, v in facts.items():
            if k in ("host.hostnames", "host.hostname", "run.hostname") or k.endswith(".hostname"):
                found.extend(v if isinstance(v, list) else [v])
        for r in ((d.get("analysis") or {}).get("ranks") or {}).values():
            found.append(r.get("host"))
        self.add_hosts(found)
        return self

    def _ip(self, m: re.Match) -> str:
        ip = m.group(0)
        if ip in _KEEP_IPS:
            return ip
        if ip not in self.ips:
            self.ips[ip] = f"ip-{len(self.ips) + 1}"
        return self.ips[ip]

    def sub(self, text: str) -> str:
        if not text:
            return text
        out = _IPV4.sub(self._ip, text)
        out = _IPV6.sub(lambda m: self._ip(m) if _v6(m.group(0)) else m.group(0), out)
        if self.hosts:
            pat = re.compile(
                r"(?<![\w\-.])("
                + "|".join(re.escape(h) for h in sorted(self.hosts, key=len, reverse=True))
                + r")(?![\w\-])"
            )
            out = pat.sub(lambda m: self.hosts[m.group(1)], out)
        return out

    def apply(self, obj):
        if isinstance(obj, str):
            return self.sub(obj)
        if isinstance(obj, dict):
            return {self.sub(k) if isinstance(k, str) else k: self.apply(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.apply(v) for v in obj]
        return obj


def redact_report(
    d: dict, redact_hosts: bool = False, hosts: HostRedactor | None = None, secrets: SecretMemory | None = None
) -> dict:
    """The diagnosis dict every renderer sees: secrets always removed, hosts on request.
    ``analysis`` (kernel names, paths, devices read from traces) is scanned for known
    credential formats only; everything else with every pattern.  The input is not modified.
    Values under secret names anywhere in ``d`` are hidden wherever else they appear, and so are those the
    analysis remembered in ``secrets`` (its logs' secrets: ``AnalysisContext.secrets``)."""
    known = SecretMemory() if secrets is None else secrets
    known.collect(d)
    out = {
        k: (
            redact_secrets(copy.deepcopy(v), k, lenient=True, known=known)
            if k == "analysis"
            else redact_secrets(copy.deepcopy(v), k, known=known)
        )
        for k, v in d.items()
    }
    if redact_hosts or hosts is not None:
        h = hosts or HostRedactor()
        h.collect(out)
        out = h.apply(out)
        out.setdefault("redaction", {})["hosts"] = True
    return out
