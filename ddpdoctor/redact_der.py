"""Base64 DER private-key bodies wherever they appear, with or without PEM markers (issue 41): a key printed
inside an error line, a repr() of a PEM file, a body logged line by line (used by redact.py)."""

from __future__ import annotations

import re

REDACTED = "<redacted>"  # what every redaction writes in place of a secret (redact.REDACTED)

# the base64 body of a DER private key (or certificate) wherever it appears, with or without PEM markers: DER
# starts with a SEQUENCE, 0x30 then its length, which base64 writes as `MII` (a 2-byte length: RSA and big
# PKCS#8 keys, certificates), `MIG`/`MH` (a 1-byte length: EC PKCS#8 and SEC1 keys) or `MC4CAQAw` (Ed25519
# PKCS#8); an OpenSSH key starts `b3BlbnNzaC1rZXktdjE` (openssh-key-v1). At least key length (the shortest,
# Ed25519, is 64 characters); the body may go on across real or escaped (`\n`) line breaks, as a repr() of
# a PEM file prints it.
DER_KEY = re.compile(
    r"(?<![A-Za-z0-9+/])(?:MII[A-Za-z0-9+/]{57,}|MIG[A-Za-z0-9+/]{57,}|MH[A-Za-z0-9+/]{58,}"
    r"|MC4CAQAw[A-Za-z0-9+/]{40,}|b3BlbnNzaC1rZXktdjE[A-Za-z0-9+/]{45,})"
    # the next piece: a whole line of base64 after a line break (a `[rank0]:` prefix kept), or a piece after an
    # escaped `\\n` that ends at the next one or the string's end
    r"(?:(?:\r?\n[ \t]*(?:\[[^\]\n]{0,60}\]:?[ \t]*)?[A-Za-z0-9+/]{4,}(?==*[ \t]*(?:\r?\n|$)))"
    r"|(?:(?:\\r)?\\n[A-Za-z0-9+/]{4,}(?==*(?:\\r|\\n|[\'\"]|$))))*={0,2}"
)
DER_PREFIXES = ("MII", "MIG", "MH", "MC4CAQAw", "b3BlbnNzaC1rZXktdjE")
_DER_BREAK = re.compile(r"(?:(?:\\r)?\\n|\r?\n)[ \t]*(?:\[[^\]\n]{0,60}\]:?[ \t]*)?")


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
