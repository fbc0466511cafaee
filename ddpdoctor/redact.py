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

REDACTED = "<redacted>"

# parts of a variable / option name that mark its value as secret
SECRET_NAME_PARTS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "AUTH",
                     "COOKIE", "SESSION", "PRIVATE", "SIGNATURE", "PWD", "APIKEY", "BEARER",
                     "WEBHOOK", "DSN", "CONN_STR", "CONNECTION_STRING", "SAS")
# names that contain one of the parts above but are not secrets (keep them readable)
NOT_SECRET_NAMES = {"PWD", "OLDPWD", "KEYTIMEOUT", "TORCHELASTIC_RUN_ID", "XDG_SESSION_TYPE", "XDG_SESSION_ID",
                    "XDG_SESSION_CLASS", "XDG_SESSION_DESKTOP", "DBUS_SESSION_BUS_ADDRESS", "SESSION_MANAGER",
                    "SSH_AUTH_SOCK", "KEYBOARD", "TERM_SESSION_ID", "MONKEY", "NCCL_IB_PKEY"}

# values that look like credentials wherever they appear
_VALUE_PATTERNS = [
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),                        # Hugging Face
    re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}"),       # OpenAI / Anthropic style
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"),                  # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}"),
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"),                   # GitLab
    re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"),   # AWS key ids
    re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),              # Slack
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),                      # Google API keys
    re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{5,}"),   # JWT
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
]
# scheme://user:password@host  -> scheme://user:<redacted>@host
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*):([^@\s/]+)@")
# key=value / key:value pairs inside a longer string (query strings, connection strings)
_INLINE_PAIR = re.compile(r"(?i)\b([A-Za-z0-9_\-]*(?:token|key|secret|password|passwd|pwd|auth|signature|sig|"
                          r"credential|session|cookie)[A-Za-z0-9_\-]*)=([^&;\s,]+)")
_HIGH_ENTROPY_TOKEN = re.compile(r"[A-Za-z0-9+/_\-]{32,}={0,2}")
_SAFE_PATHLIKE = re.compile(r"^[\w.\-/~:+@=,]*$")


def secret_name(name: str) -> bool:
    """True when a variable or option name says its value is secret."""
    upper = name.upper().lstrip("-").replace("-", "_")
    if upper in NOT_SECRET_NAMES:
        return False
    if re.search(r"(?:^|_|API|ACCESS|PRIVATE|SECRET|SIGNING|ENCRYPTION)KEYS?(?:_|$)", upper):
        return True               # API_KEY, APIKEY, SSH_KEY, AWS_SECRET_ACCESS_KEY; not MONKEY, KEYBOARD, NCCL_IB_PKEY
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
    if any(p.search(value) for p in _VALUE_PATTERNS):
        return True
    for tok in _HIGH_ENTROPY_TOKEN.findall(value):
        if "/" in tok and tok.count("/") >= 2:        # a path, not a token
            continue
        classes = sum((any(c.islower() for c in tok), any(c.isupper() for c in tok), any(c.isdigit() for c in tok)))
        if classes >= 3 and _entropy(tok) >= 4.0:
            return True
        if re.fullmatch(r"[0-9a-fA-F]{48,}", tok) and _entropy(tok) >= 3.5:    # long hex secrets (not 40-char git SHAs)
            return True
    return False


def redact_known_formats(text: str) -> str:
    """Only URL passwords and known token formats: for names read from traces (kernel names,
    paths), where the high-entropy heuristic would hide mangled C++ names."""
    if not text:
        return text
    out = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
    for p in _VALUE_PATTERNS:
        out = p.sub(REDACTED, out)
    return out


def redact_text(text: str) -> str:
    """Redact credential-looking parts inside a free-form string (URL passwords, known token
    formats, key=value pairs with secret names, long high-entropy tokens)."""
    if not text:
        return text
    out = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
    out = _INLINE_PAIR.sub(lambda m: f"{m.group(1)}={REDACTED}" if secret_name(m.group(1)) else m.group(0), out)
    for p in _VALUE_PATTERNS:
        out = p.sub(REDACTED, out)

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
