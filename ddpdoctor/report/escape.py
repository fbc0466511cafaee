"""Escaping of strings that come from traces, logs and rules (kernel names such as
``void at::native::…<float, 4>``, log lines, file paths) for Markdown and HTML.

Markdown: HTML-special characters become entities (GitHub renders ``&lt;`` as ``<``, and
no tag can open), Markdown punctuation is backslash-escaped, ``|`` is escaped so a table
cell cannot split, and newlines are folded.  Code is fenced with a fence longer than
any backtick run inside it, so its content is shown literally.
"""

from __future__ import annotations

import html
import re

_MD_PUNCT = re.compile(r"([\\`*_\[\]|~])")
_LINE_START = re.compile(r"^(\s*)(\d+)?([.)#+\-])(?=\s|$)")


def h(s) -> str:
    """HTML text or attribute value."""
    return html.escape("" if s is None else str(s), quote=True)


def md(s) -> str:
    """Markdown inline text (safe in paragraphs, list items and table cells)."""
    s = "" if s is None else str(s)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    s = _MD_PUNCT.sub(r"\\\1", s)
    s = re.sub(r"\s*\n\s*", " ", s).strip()
    return _LINE_START.sub(
        lambda m: (
            m.group(1) + (m.group(2) or "") + "\\" + m.group(3)
            if (m.group(2) is None) != (m.group(3) in ".)")
            else m.group(0)
        ),
        s,
    )


def md_multiline(s) -> str:
    """Markdown text keeping paragraphs (each line escaped)."""
    return "\n".join(md(line) for line in ("" if s is None else str(s)).splitlines())


def md_fence(s, lang: str = "") -> str:
    """A fenced code block showing ``s`` literally."""
    s = "" if s is None else str(s)
    runs = [len(m) for m in re.findall(r"`+", s)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}{lang}\n{s.rstrip()}\n{fence}"


def md_code(s) -> str:
    """Inline code for short strings outside tables (e.g. a rule id or a path)."""
    s = re.sub(r"\s*\n\s*", " ", "" if s is None else str(s))
    runs = [len(m) for m in re.findall(r"`+", s)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_prose(s) -> str:
    """Markdown inline text that keeps the `code spans` a rule wrote (each shown literally); the rest is
    escaped as :func:`md`, the spaces around a code span kept."""
    out = []
    for x in re.split(r"(`[^`\n]+`)", re.sub(r"\s+", " ", "" if s is None else str(s))):
        if len(x) > 2 and x.startswith("`") and x.endswith("`"):
            out.append(md_code(x[1:-1]))
        elif x:
            lead, trail = x[: len(x) - len(x.lstrip())], x[len(x.rstrip()) :]
            out.append(lead + md(x) + trail if x.strip() else x)
    return "".join(out).strip()
