"""Accuracy of the log engine on the real-log corpus (tests/real_logs/*/case.toml).

Each case folder holds log text posted in a public issue thread and the cause the thread established.
Runs the same path as `ddpdoctor analyze <folder>` (diagnosis.run_analyze) on a logs-only copy of each
case, checks the top finding against the case's expectations, prints accuracy by kind and writes
docs/LOG_ACCURACY.md. Usage: python benchmarks/log_corpus.py [--out docs/LOG_ACCURACY.md]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections import defaultdict
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "real_logs"
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")


def load_cases(root: Path = CORPUS) -> list[tuple[str, Path, dict]]:
    cases = []
    for toml_path in sorted(root.glob("*/case.toml")):
        with open(toml_path, "rb") as fh:
            cases.append((toml_path.parent.name, toml_path.parent, tomllib.load(fh)))
    return cases


def top_finding(case_dir: Path) -> dict | None:
    """The first finding of `ddpdoctor analyze` on a copy holding only the case's log files."""
    from ddpdoctor.diagnosis import run_analyze

    with tempfile.TemporaryDirectory() as tmp:
        for f in case_dir.iterdir():
            if f.suffix in LOG_SUFFIXES:
                shutil.copy(f, Path(tmp) / f.name)
        report = run_analyze([tmp])
    findings = report.diagnosis.findings
    return findings[0] if findings else None


def fix_text(finding) -> str:
    return "\n".join(f"{fx.title}\n{fx.change}" for fx in finding.fixes)


def check(case: dict, finding) -> list[str]:
    """Reasons the top finding does not match the case; empty when it does."""
    if finding is None:
        return ["no finding"]
    problems = []
    rules = case.get("expected_rule")
    rules = [rules] if isinstance(rules, str) else (rules or [])
    if rules and finding.rule not in rules:
        problems.append(f"top rule {finding.rule}, expected {' or '.join(rules)}")
    rank = case.get("expected_rank")
    if rank is not None and rank not in (finding.ranks or []):
        problems.append(f"ranks {finding.ranks}, expected {rank}")
    want = case.get("expected_fix_contains")
    if want and want.lower() not in fix_text(finding).lower():
        problems.append(f"no fix mentions {want!r}")
    return problems


def _commit(path: str | None) -> str:
    try:
        import ddpdoctor
        where = Path(ddpdoctor.__file__).resolve().parent.parent
        sha = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        branch = subprocess.run(["git", "-C", str(where), "rev-parse", "--abbrev-ref", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        return f"{branch} @ {sha} ({where})"
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(CORPUS.parent.parent / "docs" / "LOG_ACCURACY.md"))
    args = ap.parse_args(argv)
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    rows = []
    for name, folder, case in load_cases():
        finding = top_finding(folder)
        problems = check(case, finding)
        k = case["kind"]
        by_kind[k][1] += 1
        by_kind[k][0] += not problems
        got = f"{finding.rule}" if finding else "-"
        want = case.get("expected_rule", "-")
        rows.append((name, k, want if isinstance(want, str) else " or ".join(want), got, "; ".join(problems) or "right"))
        print(f"{'ok  ' if not problems else 'MISS'} {name}: {got} {'; '.join(problems)}")
    right = sum(v[0] for v in by_kind.values())
    total = sum(v[1] for v in by_kind.values())
    code = _commit(None)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# Log engine accuracy on real log excerpts", "",
             f"Measured {date} by `benchmarks/log_corpus.py` on code {code}.",
             "Each case is a log excerpt posted in a public issue thread (tests/real_logs/, see its MANIFEST.md);",
             "right = the top finding has the expected rule, names the expected rank and gives the expected fix.",
             "", "| kind | right / total |", "|---|---|"]
    for k in sorted(by_kind):
        lines.append(f"| {k} | {by_kind[k][0]} / {by_kind[k][1]} |")
    lines += [f"| **overall** | **{right} / {total}** ({100 * right / max(total, 1):.0f} %) |", "",
              "| case | kind | expected | top finding | result |", "|---|---|---|---|---|"]
    lines += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} |" for r in rows]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"overall {right}/{total}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
