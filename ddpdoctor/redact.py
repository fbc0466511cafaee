"""Redaction of secrets in environment variables and command lines (pure Python, no torch).

Used by ``ddpdoctor run`` before anything is written to a bundle, and reusable by the
report code.  Redaction is deliberately over-eager: a bundle is meant to be attached to a
bug ticket, so a false positive (a harmless value hidden) is cheaper than a leaked token.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from .text import strip_terminal  # noqa: F401  (re-exported: report and ticket code redact and strip at once)

REDACTED = "<redacted>"

# parts of a variable / option name that mark its value as secret
SECRET_NAME_PARTS = (
    "TOKEN",
    "KEY",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "SIGNATURE",
    "PWD",
    "APIKEY",
    "BEARER",
    "WEBHOOK",
    "DSN",
    "CONN_STR",
    "CONNECTION_STRING",
    "SAS",
)
# names that contain one of the parts above but are not secrets (keep them readable)
NOT_SECRET_NAMES = {
    "PWD",
    "OLDPWD",
    "KEYTIMEOUT",
    "TORCHELASTIC_RUN_ID",
    "XDG_SESSION_TYPE",
    "XDG_SESSION_ID",
    "XDG_SESSION_CLASS",
    "XDG_SESSION_DESKTOP",
    "DBUS_SESSION_BUS_ADDRESS",
    "SESSION_MANAGER",
    "SSH_AUTH_SOCK",
    "KEYBOARD",
    "TERM_SESSION_ID",
    "MONKEY",
    "NCCL_IB_PKEY",
}

# a whole PEM private-key block (body too); an unterminated one to the end of the text
_PEM_BLOCK = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S
)
# a DER private key's (or certificate's) base64 body anywhere, with or without PEM markers: a SEQUENCE (0x30)
# and its length read `MII` (RSA, big PKCS#8), `MIG`/`MH` (EC), `MC4CAQAw` (Ed25519), `b3BlbnNzaC1rZXktdjE`
# (openssh-key-v1); of key length, across real or escaped (`\n`, a PEM file's repr()) line breaks
DER_KEY = re.compile(
    r"(?<![A-Za-z0-9+/])(?:MII[A-Za-z0-9+/]{57,}|MIG[A-Za-z0-9+/]{57,}|MH[A-Za-z0-9+/]{58,}"
    r"|MC4CAQAw[A-Za-z0-9+/]{40,}|b3BlbnNzaC1rZXktdjE[A-Za-z0-9+/]{45,})"
    # the next piece: a base64 line after a line break (`[rank0]:` kept), or a piece after an escaped `\\n`
    r"(?:(?:\r?\n[ \t]*(?:\[[^\]\n]{0,60}\]:?[ \t]*)?[A-Za-z0-9+/]{4,}(?==*[ \t]*(?:\r?\n|$)))"
    r"|(?:(?:\\r)?\\n[A-Za-z0-9+/]{4,}(?==*(?:\\r|\\n|[\'\"]|$))))*={0,2}"
)
DER_PREFIXES = ("MII", "MIG", "MH", "MC4CAQAw", "b3BlbnNzaC1rZXktdjE")
_DER_BREAK = re.compile(r"(?:(?:\\r)?\\n|\r?\n)[ \t]*(?:\[[^\]\n]{0,60}\]:?[ \t]*)?")


# where a token may start: not after a letter or digit (`\b` would miss `rank1_sk-proj-…` in a file name)
_TOKEN_START = r"(?<![A-Za-z0-9])"
# values that look like credentials wherever they appear
_VALUE_PATTERNS = [  # (pattern, literals one of which a match holds: a text without them is not scanned)
    (re.compile(_TOKEN_START + r"hf_[A-Za-z0-9]{20,}"), ("hf_",)),  # Hugging Face
    (re.compile(_TOKEN_START + r"sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}"), ("sk-",)),  # OpenAI / Anthropic style
    (re.compile(_TOKEN_START + r"gh[pousr]_[A-Za-z0-9]{30,}"), ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),  # GitHub
    (re.compile(_TOKEN_START + r"github_pat_[A-Za-z0-9_]{30,}"), ("github_pat_",)),
    (re.compile(_TOKEN_START + r"glpat-[A-Za-z0-9_\-]{20,}"), ("glpat-",)),  # GitLab
    (
        re.compile(
            _TOKEN_START + r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Za-z0-9])"
        ),  # AWS key ids
        ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA"),
    ),
    (re.compile(_TOKEN_START + r"xox[abposr]-[A-Za-z0-9\-]{10,}"), ("xox",)),  # Slack
    (re.compile(_TOKEN_START + r"AIza[0-9A-Za-z_\-]{35}"), ("AIza",)),  # Google API keys
    (re.compile(_TOKEN_START + r"eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{5,}"), ("eyJ",)),  # JWT
    (_PEM_BLOCK, ("PRIVATE KEY",)),
    (DER_KEY, DER_PREFIXES),
    (re.compile(_TOKEN_START + r"xapp-[A-Za-z0-9\-]{10,}"), ("xapp-",)),  # Slack app tokens
    (re.compile(_TOKEN_START + r"npm_[A-Za-z0-9]{30,}"), ("npm_",)),
]
# `Authorization: Bearer X`, `Bearer X`, `Authorization: Basic X`, `X-Api-Key: X` (header value redacted)
_AUTH_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key|x-auth-token|private-token)"
    r"([\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|token|digest)\s+)?([^\s\"',;]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)([A-Za-z0-9._~+/\-]{8,}=*)")
# `wandb login <40 hex>` and a 40-hex key right after a W&B name
_WANDB = re.compile(r"(?i)(\bwandb\s+login\s+(?:--?[\w\-]+(?:=\S+)?\s+)*)([0-9a-f]{40})\b")
# a printed Python list of argv: ['--api-key', 'abc'] / ("--password", "x")
_ARGV_LIST_PAIR = re.compile(r"(['\"])(--?[A-Za-z][\w\-]*)\1(\s*,\s*)(['\"])([^'\"\n]*)\4")
# scheme://user:password@host  -> scheme://user:<redacted>@host
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*):([^@\s/]+)@")
# key=value / key:value pairs inside a longer string (query strings, connection strings)
_INLINE_PAIR = re.compile(
    r"(?i)\b([A-Za-z0-9_\-]*(?:token|key|secret|password|passwd|pwd|auth|signature|sig|"
    r"credential|session|cookie)[A-Za-z0-9_\-]*)(=|[\"']?\s*[:=]\s*[\"']?)(?!(?i:bearer|basic|token|digest)\s)([^&;\s,\"'\]\)}<]+)"
)
_HIGH_ENTROPY_TOKEN = re.compile(r"[A-Za-z0-9+/_\-]{32,}={0,2}")
# PEM private-key markers, and a line that holds nothing but base64 after log prefixes (`[rank0]:`, `[default1]:`):
# a candidate body line of a key printed across several lines
_KEY_MARKER = re.compile(r"-----(BEGIN|END) [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_B64_LINE = re.compile(r"(?m)^([ \t]*(?:\[[^\]\n]{0,60}\]:?[ \t]*)*)([A-Za-z0-9+/]{4,}={0,2})([ \t]*\r?)$")
_MIN_KEY_LINE = 32
_B64_LONG_LINE = re.compile(r"(?m)^([ \t]*(?:\[[^\]\n]{0,60}\]:?[ \t]*)*)([A-Za-z0-9+/]{32,}={0,2})([ \t]*\r?)$")


def secret_name(name: str) -> bool:
    """True when a variable or option name says its value is secret."""
    upper = name.upper().lstrip("-").replace("-", "_")
    if upper in NOT_SECRET_NAMES:
        return False
    if re.search(r"(?:^|_|API|ACCESS|PRIVATE|SECRET|SIGNING|ENCRYPTION)KEYS?(?:_|$)", upper):
        return True  # API_KEY, APIKEY, SSH_KEY, AWS_SECRET_ACCESS_KEY; not MONKEY, KEYBOARD, NCCL_IB_PKEY
    if re.search(r"(?:^|_)(?:PWD|SAS|DSN)(?:_|$)", upper):
        return True
    return any(part in upper for part in SECRET_NAME_PARTS if part not in ("KEY", "PWD", "SAS", "DSN"))


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values()) if n else 0.0


def looks_like_secret(value: str) -> bool:
    """True when a bare value looks like a credential: a known token format or a long
    high-entropy string mixing letter cases and digits (paths and plain words do not count)."""
    if not value:
        return False
    if any(p.search(value) for p, lits in _VALUE_PATTERNS if any(x in value for x in lits)):
        return True
    for tok in _HIGH_ENTROPY_TOKEN.findall(value):
        if (
            len(tok) == 40
            and re.fullmatch(r"[A-Za-z0-9/+]{40}", tok)
            and not tok.startswith("/")
            and sum((any(c.islower() for c in tok), any(c.isupper() for c in tok), any(c.isdigit() for c in tok))) == 3
            and _entropy(tok) >= 4.0
        ):
            return True  # an AWS secret access key (may hold '/')
        if "/" in tok and tok.count("/") >= 2:  # a path, not a token
            continue
        classes = sum((any(c.islower() for c in tok), any(c.isupper() for c in tok), any(c.isdigit() for c in tok)))
        if classes >= 3 and _entropy(tok) >= 4.0:
            return True
        if re.fullmatch(r"[0-9a-fA-F]{48,}", tok) and _entropy(tok) >= 3.5:  # long hex secrets (not 40-char git SHAs)
            return True
    return False


_MIN_KNOWN_LEN = 6
_SECRET_HINT = re.compile(r"(?i)token|key|secret|passw|pwd|auth|bearer|cookie|session|credential|signature|login")


class SecretMemory:
    """The values one analysis (or one ``ddpdoctor bundle`` archive) has seen under a secret name: hidden
    wherever they reappear in what that analysis writes.  Each analysis has its own (``AnalysisContext``);
    nothing is remembered across analyses or shared between threads."""

    def __init__(self) -> None:
        self.values: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self.values)

    def remember(self, value) -> None:
        """Mark ``value`` as a secret: every later redaction with this memory hides it wherever it occurs."""
        if isinstance(value, str):
            v = value.strip().strip("'\"")
            if len(v) >= _MIN_KNOWN_LEN and v != REDACTED and v.lower() not in ("bearer", "basic", "digest"):
                self.values.add(v)

    def collect(self, obj, _key: str | None = None) -> None:
        """Remember the secret values in a JSON-like object or text (values of secret-named keys,
        of secret-named options and NAME=value pairs) before anything is redacted, so that the
        same value printed elsewhere (a log echoing its argv) is hidden too."""
        if isinstance(obj, dict):
            for k, v in obj.items():
                self.collect(v, str(k))
            return
        if isinstance(obj, (list, tuple)):
            items = list(obj)
            for i, v in enumerate(items):
                if isinstance(v, str) and v.startswith("-") and secret_name(v.split("=", 1)[0].lstrip("-")):
                    if "=" in v:
                        self.remember(v.split("=", 1)[1])
                    elif i + 1 < len(items):
                        self.remember(items[i + 1])
                self.collect(v, _key)
            return
        if not isinstance(obj, str):
            return
        if _key is not None and secret_name(_key):
            self.remember(obj)
        if len(obj) > 64 << 20:
            return
        for m in _INLINE_PAIR.finditer(obj):
            if secret_name(m.group(1)):
                self.remember(m.group(3))
        for m in _ARGV_LIST_PAIR.finditer(obj):
            if secret_name(m.group(2).lstrip("-")):
                self.remember(m.group(5))
        for m in re.finditer(r"(?<![\w\-])(--?[A-Za-z][\w\-]*)(?:=|\s+)([^\s\"'-][^\s\"']*)", obj):
            if secret_name(m.group(1).lstrip("-")):
                self.remember(m.group(2))
        for m in _BEARER.finditer(obj):
            self.remember(m.group(3))

    def collect_log(self, text: str) -> None:
        """:meth:`collect` over the lines of a log that name a secret (`Namespace(hf_token='…')`,
        `--api-key X`, `Bearer …`), so that the same value echoed on another line is hidden too.  Only
        those lines are scanned: the full scan costs about a second per MB."""
        if not text:
            return
        seen = -1
        for m in _SECRET_HINT.finditer(text):
            if m.start() <= seen:
                continue
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            end = len(text) if end < 0 else end
            self.collect(text[start:end])
            seen = end

    def hide(self, text: str) -> str:
        """``text`` with every remembered value replaced (the longest first)."""
        for v in sorted(self.values, key=len, reverse=True):
            if v in text:
                text = text.replace(v, REDACTED)
        return text


def _headers(out: str) -> str:
    out = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) + ' ' if m.group(3) else ''}{REDACTED}", out)
    return _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", out)


def _key_body_line(tok: str) -> bool:
    """A whole line of base64 that is recognisably key material on its own: long, all three
    character classes (or base64's own + and /), high entropy. Hex digests (two classes) are not."""
    core = tok.rstrip("=")
    if len(core) < _MIN_KEY_LINE:
        return False
    classes = sum((any(c.islower() for c in core), any(c.isupper() for c in core), any(c.isdigit() for c in core)))
    return (classes == 3 or (classes == 2 and any(c in "+/" for c in core))) and _entropy(core) >= 4.0


def _key_tail_line(tok: str) -> bool:
    """The short last line of a key body (after a body line): mixed characters, not a word like `Epoch`."""
    core = tok.rstrip("=")
    classes = sum((any(c.islower() for c in core), any(c.isupper() for c in core), any(c.isdigit() for c in core)))
    return len(core) >= 8 and (classes >= 2 or tok.endswith("="))


def _line_at(text: str, start: int) -> re.Match | None:
    """The base64-only line starting at ``start``, if it is one."""
    return _B64_LINE.match(text, start) if 0 <= start < len(text) else None


def redact_key_lines(text: str) -> str:
    """Key material printed across lines.  Base64-only lines (log prefixes such as ``[rank0]:`` kept)
    are hidden when they are key material on their own, when they follow such a line (the short last
    line of a body), and as a whole run when it starts right after an ``-----BEGIN … PRIVATE KEY-----``
    line or ends right before an ``-----END …`` line — the marker may be far away, in another file.
    One regex scan for long lines; short lines are looked at only beside a marker or a key line."""
    if not text:
        return text
    hide: dict[int, re.Match] = {}
    run: list[re.Match] = []  # consecutive long base64 lines; hidden whole if one is a key line

    def close_run() -> None:
        if run and any(_key_body_line(m.group(2)) for m in run):
            hide.update((m.start(2), m) for m in run)
            nxt = _line_at(text, run[-1].end() + 1)
            if nxt is not None and _key_tail_line(nxt.group(2)):
                hide[nxt.start(2)] = nxt
        run.clear()

    for m in _B64_LONG_LINE.finditer(text):
        if run and text[run[-1].end() : m.start()] != "\n":
            close_run()
        run.append(m)
    close_run()
    if "PRIVATE KEY" in text:
        for k in _KEY_MARKER.finditer(text):
            if k.group(1) == "BEGIN":  # the lines after it, while they are base64
                pos = text.find("\n", k.end())
                while pos >= 0 and (m := _line_at(text, pos + 1)) is not None:
                    hide[m.start(2)] = m
                    pos = m.end() if m.end() < len(text) and text[m.end()] == "\n" else -1
            else:  # the lines before it, while they are base64
                pos = text.rfind("\n", 0, k.start())
                while pos > 0:
                    start = text.rfind("\n", 0, pos) + 1
                    m = _line_at(text, start)
                    if m is None or m.end() != pos:
                        break
                    hide[m.start(2)] = m
                    pos = start - 1
    if not hide:
        return text
    out, pos = [], 0
    for _, m in sorted(hide.items()):
        out += [text[pos : m.start(2)], REDACTED]
        pos = m.end(2)
    out.append(text[pos:])
    return "".join(out)


def der_redacted(m: re.Match) -> str:
    """A DER key body hidden piece by piece: its line breaks and log prefixes stay, so that line numbers
    still point at the file and a `[rank0]:` still says whose line it was."""
    body, out, pos = m.group(0), [], 0
    for b in _DER_BREAK.finditer(body):
        out += [REDACTED, b.group(0)]
        pos = b.end()
    return "".join(out) + REDACTED if pos < len(body) else "".join(out)


def redact_der_keys(text: str) -> str:
    """Base64 DER private-key bodies (``MII…`` of key length), with or without PEM markers."""
    if not text or not any(x in text for x in DER_PREFIXES):
        return text
    return DER_KEY.sub(der_redacted, text)


def redact_keys(text: str) -> str:
    """Private keys in a whole log before it is parsed: PEM blocks (one ``<redacted>`` per line, so
    line numbers still point at the file) and key lines (:func:`redact_key_lines`)."""
    if not text:
        return text
    if "PRIVATE KEY" in text:
        text = _PEM_BLOCK.sub(lambda m: "\n".join(REDACTED for _ in range(m.group(0).count("\n") + 1)), text)
    return redact_key_lines(redact_der_keys(text))


def _structured(out: str, known: SecretMemory | None) -> str:
    out = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", out)
    out = _headers(out)
    out = _WANDB.sub(lambda m: f"{m.group(1)}{REDACTED}", out)
    out = _ARGV_LIST_PAIR.sub(
        lambda m: (
            f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{REDACTED}{m.group(4)}"
            if secret_name(m.group(2).lstrip("-"))
            else m.group(0)
        ),
        out,
    )
    for p, lits in _VALUE_PATTERNS:
        if any(x in out for x in lits):
            out = p.sub(der_redacted if p is DER_KEY else REDACTED, out)
    out = redact_key_lines(out)
    return known.hide(out) if known else out


def redact_known_formats(text: str, known: SecretMemory | None = None) -> str:
    """Only URL passwords, headers, known token formats and the values ``known`` remembers: for names
    read from traces (kernel names, paths), where the high-entropy heuristic would hide mangled
    C++ names."""
    if not text:
        return text
    return _structured(text, known)


def redact_text(text: str, known: SecretMemory | None = None) -> str:
    """Redact credential-looking parts inside a free-form string (URL passwords, known token
    formats, key=value pairs with secret names, long high-entropy tokens, the values ``known`` remembers)."""
    if not text:
        return text
    out = _INLINE_PAIR.sub(
        lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}" if secret_name(m.group(1)) else m.group(0), _headers(text)
    )
    out = _structured(out, known)

    def _tok(m: re.Match) -> str:
        return REDACTED if looks_like_secret(m.group(0)) else m.group(0)

    return _HIGH_ENTROPY_TOKEN.sub(_tok, out)


def redact_value(name: str, value: str) -> str:
    """The value of variable ``name`` as it may be recorded."""
    if secret_name(name):
        return REDACTED if value else value
    return redact_text(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment with secret names and credential-looking values redacted."""
    return {k: redact_value(k, v) for k, v in sorted(env.items())}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with credentials redacted: the value after a secret-named option
    (``--hf-token X``, ``--api-key=X``, ``--password X``, ``-p`` is left alone), secret
    ``NAME=value`` assignments, URL passwords and credential-looking values."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            out.append(REDACTED)
            continue
        if arg.startswith("-") and len(arg) > 1 and arg != "--":
            name, eq, val = arg.partition("=")
            if secret_name(name.lstrip("-")):
                if eq:
                    out.append(f"{name}={REDACTED}")
                else:
                    out.append(arg)
                    hide_next = True
                continue
            if eq:
                out.append(f"{name}={redact_text(val)}")
                continue
            out.append(arg)
            continue
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_.\-]*)=(.*)", arg, re.S)
        if m and secret_name(m.group(1)):
            out.append(f"{m.group(1)}={REDACTED}")
            continue
        out.append(redact_text(arg))
    return out


def join_argv(argv: Sequence[str]) -> str:
    """A shell-quoted, redacted command line as one string."""
    import shlex

    return shlex.join(redact_argv(argv))
