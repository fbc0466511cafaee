"""Plain-text layout for every view and message: wrapping at words with a hanging indent, code kept
as written, lines cut to a width with an ellipsis, counted nouns. The bottom layer: it imports nothing
of ddpdoctor, so anything may use it."""

from __future__ import annotations

import re
import shlex
import textwrap

WIDTH = 80


def wrap(text: str, width: int = WIDTH, first: str = "", rest: str | None = None) -> list[str]:
    """Prose wrapped at words: ``first`` before the first line, ``rest`` (default: as many spaces) after."""
    rest = " " * len(first) if rest is None else rest
    text = " ".join(str(text).split())
    if not text:
        return [first.rstrip()] if first.strip() else []
    width = max(20, width)
    # a `command` that fits on a line is kept whole: a shell command cut in two does not paste
    room = width - len(rest)
    text = re.sub(r"`[^`]+`", lambda m: m.group(0).replace(" ", _KEEP) if len(m.group(0)) <= room else m.group(0), text)
    lines = textwrap.wrap(
        text, width=width, initial_indent=first, subsequent_indent=rest, break_long_words=False, break_on_hyphens=False
    ) or [first.rstrip()]
    return [ln.replace(_KEEP, " ") for ln in lines]


_KEEP = "\u2060"  # stands for a space inside a `command` while wrapping (word joiner: never in our text)


def is_code(line: str) -> bool:
    """A fix line that must stay as written: a diff line, a comment, an indented or shell line."""
    s = line.lstrip()
    return (
        line.startswith(("+", "-  ", "  ", "\t", "#", "$ "))
        or s.startswith(("export ", "ddpdoctor "))
        or (line[:1] == "-" and not line.startswith("- "))
    )


def block(change: str, width: int = WIDTH, indent: str = "  ", cut_code: bool = False) -> list[str]:
    """A fix's change: code lines as written (never re-flowed; ``cut_code``: cut at the width with
    ``…``, for the card, whose full text is one ``-v`` away), comment lines re-wrapped as comments,
    prose paragraphs wrapped; a ``- `` bullet keeps its hanging indent."""
    return [line for item in block_items(change, width, indent, cut_code) for line in item]


def block_items(change: str, width: int = WIDTH, indent: str = "  ", cut_code: bool = False) -> list[list[str]]:
    """The lines of :func:`block`, grouped into the items a reader sees: a paragraph, a bullet, a comment,
    a run of code lines (so that a shortened view can leave out whole items, never half of one)."""
    out: list[list[str]] = []
    para: list[str] = []
    comment: list[str] = []  # consecutive "# " lines: one comment, re-wrapped whole when too wide
    code: list[str] = []
    bullet = False
    diff = _diff(change)

    def flush():
        nonlocal para, bullet, comment, code
        if code:
            out.append(code)
        if para:
            lead = indent + ("- " if bullet else "")
            out.append(wrap(" ".join(para), width, lead, indent + ("  " if bullet else "")))
        if comment:
            if any(len(indent + c) > width for c in comment):
                out.append(wrap(" ".join(c[2:].strip() for c in comment), width, indent + "# ", indent + "# "))
            else:
                out.append([indent + c.rstrip() for c in comment])
        para, bullet, comment, code = [], False, [], []

    for line in change.strip("\n").splitlines():
        if not line.strip():
            flush()
            continue
        if comment and not line.startswith("# "):
            flush()
        if line.startswith("- ") and not diff:
            flush()
            para, bullet = [line[2:]], True
        elif line.startswith("# "):
            if para or code:
                flush()
            comment.append(line)
        elif is_code(line) and not (bullet and line.startswith("  ") and not diff):
            if para:
                flush()
            code.append(cut(indent + line.rstrip(), width, at_word=False) if cut_code else indent + line.rstrip())
        else:
            if code:
                flush()
            para.append(line.strip())
    flush()
    return out


def _diff(change: str) -> bool:
    return any(x.startswith("+") for x in change.splitlines())


def cut(line: str, width: int = WIDTH, at_word: bool = True) -> str:
    """``line`` within ``width`` characters, ending in "…" when cut: prose at the end of a word (never inside
    one, "failure of ano…") unless the last word starts in the first half of the line; code (``at_word``
    False) where the width ends, so that as much of it shows as fits."""
    if len(line) <= width:
        return line
    head = line[: width - 1]
    if at_word and not line[width - 1].isspace():
        space = head.rfind(" ")
        if space > width // 2:
            head = head[:space]
    return (head.rstrip(" ,;:—-") if at_word else head) + "…"


def command(argv: list[str] | str) -> str:
    return argv if isinstance(argv, str) else shlex.join(argv)


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


_QUOTED = re.compile(r"'[^']*'" + r'|"(?:[^"\\]|\\.)*"')


def _splittable(line: str) -> bool:
    """A backslash-newline joins a word again only outside quotes and after no other backslash."""
    body = line[:-2] if line.endswith(" \\") else line
    return not any(c in body for c in "'\"`\\")


def shell(cmd: str, width: int = WIDTH, first: str = "", rest: str = "    ") -> list[str]:
    """A command wrapped at spaces with `` \\`` continuations, so it still pastes into a shell. A word
    longer than a line (a deep path) is split with a bare ``\\`` and goes on at the line's start: the
    shell removes backslash-newline, so the pasted word is whole again."""
    width = max(20, width)
    kept = _QUOTED.sub(lambda m: m.group(0).replace(" ", _KEEP), cmd)  # never wrap inside quotes
    lines = textwrap.wrap(
        kept,
        width=width - 2,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [first]
    lines = [ln.replace(_KEEP, " ") for ln in lines]
    out = [ln + " \\" for ln in lines[:-1]] + lines[-1:]
    fitted: list[str] = []
    for ln in out:
        while len(ln) > width and _splittable(ln):
            fitted.append(ln[: width - 1] + "\\")
            ln = ln[width - 1 :]
        fitted.append(ln)
    return fitted


# each column in the words a sentence uses ("its extra time goes to …")
PHASE_WORDS: dict[str, str] = {
    "step_time": "the whole step",
    "dataloader_wait": "waiting for its DataLoader",
    "forward": "the forward pass",
    "backward": "the backward pass",
    "optimizer": "the optimizer step",
    "gpu_busy": "GPU work",
    "compute": "compute",
    "comm": "communication",
    "comm_exposed": "communication that compute does not hide",
    "comm_sync_wait": "waiting for peers in collectives",
    "comm_transfer": "transferring data in collectives",
    "memcpy": "memory copies",
    "host_idle": "host-side work while the GPU idles",
    "other": "work outside any traced operator",
}


# ESC-introduced terminal sequences (CSI, OSC, single-character) and other C0 controls but \t \n \r
_TERMINAL = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\\\)?|\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]?|\x9b[0-?]*[ -/]*[@-~]"
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
)


def strip_terminal(text: str) -> str:
    """Terminal escape sequences (colors, OSC titles and links) and control characters removed."""
    return _TERMINAL.sub("", text) if text else text
