"""Coverage of the message catalogue (rules/messages/) over the message families of the sources.

benchmarks/message_families.toml lists the user-facing error and warning families of torch.distributed,
torch.utils.data, NCCL and gloo, each with the source file and version it was read at and one message as that
source prints it. A family is *covered* when the catalogue's matcher (ddpdoctor/logs/messages.py) finds an
entry for its message whose cause and fix are specific (``specific`` not false); *recognised* when it finds
any entry. Symptom families (the message says something else failed first) are counted apart: their entries
point at the earlier error and cannot be specific. With an NCCL checkout (``--nccl-repo``, default the
fetched mirror when present) it also extracts every WARN format string of NCCL's bootstrap, socket, shm, P2P,
IB, proxy, init and graph (search.cc, xml.cc) sources at the given tags and counts those the catalogue's patterns find.

Usage: python benchmarks/message_coverage.py [--out docs/MESSAGES.md] [--nccl-repo DIR] [--tags v2.21.5-1,v2.27.7-1]
Writes the table between the coverage markers of docs/MESSAGES.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ROOT / "benchmarks" / "message_families.toml"
START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"
NCCL_FILES = [
    "src/init.cc",
    "src/bootstrap.cc",
    "src/misc/socket.cc",
    "src/misc/shmutils.cc",
    "src/transport/p2p.cc",
    "src/transport/net_ib.cc",
    "src/transport/net_socket.cc",
    "src/misc/ibvwrap.cc",
    "src/proxy.cc",
    "src/include/checks.h",
    "src/graph/search.cc",
    "src/graph/xml.cc",
]
DEFAULT_MIRROR = Path("/work/.mirror/NVIDIA+nccl/repo")
_WARN = re.compile(r'\bWARN\(\s*"((?:[^"\\]|\\.)*)"')
_FMT = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t)?([diouxXeEfgGcsp%])")
_FILL = {
    "d": "1",
    "i": "1",
    "o": "1",
    "u": "1",
    "x": "1a2b",
    "X": "1A2B",
    "e": "1.0",
    "E": "1.0",
    "f": "1.0",
    "g": "1",
    "G": "1",
    "c": "c",
    "s": "mlx5_0",
    "p": "0x7f12",
    "%": "%",
}


def family_rows() -> list[dict]:
    from ddpdoctor.logs.catalogue import default_messages
    from ddpdoctor.logs.messages import scan

    by_id = {m.id: m for m in default_messages()}
    rows = []
    for fam in tomllib.loads(FAMILIES.read_text(encoding="utf-8"))["family"]:
        found = [by_id[i] for i in scan([["sample", 1, fam["sample"], None, None]])]
        specific = [m for m in found if m.specific]
        rows.append(
            {
                "name": fam["name"],
                "source": fam["source"],
                "symptom": bool(fam.get("symptom")),
                "ids": [m.id for m in found],
                "covered": bool(specific),
                "recognised": bool(found),
            }
        )
    return rows


def nccl_warns(repo: Path, tags: list[str]) -> list[tuple[str, str, str]]:
    """(tag, file, format string) of every WARN in the NCCL files above, at each tag."""
    out = []
    for tag in tags:
        for f in NCCL_FILES:
            try:
                text = subprocess.run(
                    ["git", "-C", str(repo), "show", f"{tag}:{f}"], capture_output=True, text=True, check=True
                ).stdout
            except subprocess.CalledProcessError:
                continue
            # a WARN string may be split over adjacent literals: join "a" "b"
            text = re.sub(r'"\s*\n\s*"', "", text)
            out += [(tag, f, m.group(1)) for m in _WARN.finditer(text)]
    return out


def _fmt_regex(fmt: str) -> re.Pattern:
    """A printf format string as a regex: its literal text, each conversion any text."""
    parts = _FMT.split(fmt)
    out = []
    for i, part in enumerate(parts):
        out.append(re.escape(part.replace("\\n", "")) if i % 2 == 0 else ("%" if part == "%" else ".*?"))
    return re.compile("".join(out))


def warn_coverage(repo: Path, tags: list[str]) -> tuple[int, int, list[str]]:
    """A WARN is covered when a catalogue excerpt is an instance of its format string (so the entry's patterns,
    which the loader checks against every excerpt, find it as NCCL prints it)."""
    from ddpdoctor.logs.catalogue import default_messages

    lines = [(m, line) for m in default_messages() for ex in m.excerpts for line in ex.text.splitlines()]
    warns = sorted({(f, s) for _t, f, s in nccl_warns(repo, tags)})
    hit, missed = 0, []
    for f, s in warns:
        rx = _fmt_regex(s)
        if any(rx.search(line) and m.match(line) for m, line in lines):
            hit += 1
        else:
            missed.append(f"{f}: {s}")
    return hit, len(warns), missed


def table(rows: list[dict], warn: tuple | None, tags: list[str]) -> str:
    cause = [r for r in rows if not r["symptom"]]
    sym = [r for r in rows if r["symptom"]]
    cov = sum(r["covered"] for r in cause)
    lines = [
        f"Measured by `python benchmarks/message_coverage.py` over benchmarks/message_families.toml "
        f"({len(rows)} families).",
        "",
        f"- **Cause families with a specific cause and fix: {cov} / {len(cause)} "
        f"({100 * cov / max(len(cause), 1):.0f} %)**",
        f"- symptom families recognised (their entries point at the earlier error): "
        f"{sum(r['recognised'] for r in sym)} / {len(sym)}",
        f"- all families with a specific cause and fix: {sum(r['covered'] for r in rows)} / {len(rows)} "
        f"({100 * sum(r['covered'] for r in rows) / max(len(rows), 1):.0f} %)",
    ]
    if warn is not None:
        hit, total, _missed = warn
        lines.append(
            f"- every `WARN(...)` format string of NCCL {', '.join(tags)} in {len(NCCL_FILES)} source files "
            f"(bootstrap, socket, shm, P2P, IB, proxy, init, CUDA checks, graph import; internal assertions included): "
            f"{hit} / {total} have a catalogue excerpt of that form ({100 * hit / max(total, 1):.0f} %)"
        )
    lines += ["", "| family | source read | kind | catalogue entries | covered |", "|---|---|---|---|---|"]
    for r in rows:
        mark = "yes" if r["covered"] else "recognised only" if r["recognised"] else "**no**"
        lines.append(
            f"| {r['name']} | `{r['source']}` | {'symptom' if r['symptom'] else 'cause'} | "
            f"{', '.join(f'`{i}`' for i in r['ids']) or '-'} | {mark} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "MESSAGES.md"))
    ap.add_argument("--nccl-repo", default=os.environ.get("NCCL_REPO", str(DEFAULT_MIRROR)))
    ap.add_argument("--tags", default="v2.18.3-1,v2.21.5-1,v2.27.7-1")
    args = ap.parse_args(argv)
    rows = family_rows()
    tags = args.tags.split(",")
    repo = Path(args.nccl_repo)
    warn = warn_coverage(repo, tags) if (repo / "HEAD").exists() or (repo / ".git").exists() else None
    body = table(rows, warn, tags)
    for r in rows:
        print(f"{'ok  ' if r['covered'] else 'sym ' if r['recognised'] else 'MISS'} {r['name']}: {', '.join(r['ids'])}")
    if warn is not None:
        print(f"NCCL WARN strings found: {warn[0]}/{warn[1]}")
    out = Path(args.out)
    doc = out.read_text(encoding="utf-8") if out.exists() else f"{START}\n{END}\n"
    if START not in doc or END not in doc:
        print(f"{out}: no coverage markers ({START} … {END})", file=sys.stderr)
        return 2
    out.write_text(doc[: doc.index(START) + len(START)] + "\n" + body + "\n" + doc[doc.index(END) :], encoding="utf-8")
    print(body.splitlines()[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
