"""The blind scenarios' scores in one matrix run: verdict, rule and first fix right, per condition.

    python benchmarks/blind_scores.py MATRIX.json [MATRIX.json ...]

MATRIX.json is what `python benchmarks/accuracy.py --json MATRIX.json` writes; the blind scenarios are
the ones docs/first_sight.json lists (written by a helper that had not read the rules, scored once at
first sight there).  Prints a Markdown table, and each blind scenario that is wrong with what it answered.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    blind = {s["scenario"] for s in json.loads((ROOT / "docs" / "first_sight.json").read_text())["scenarios"]}
    runs = [r for p in paths for r in json.loads(Path(p).read_text())["results"] if r["name"] in blind]
    print("| condition | runs | verdict right | rule right | first fix right (scored) |")
    print("|---|---|---|---|---|")
    for cond in sorted({r["condition"] for r in runs}):
        rs = [r for r in runs if r["condition"] == cond]
        scored = [r for r in rs if r["fix_ok"] is not None]
        print(
            f"| {cond} | {len(rs)} | {sum(bool(r['verdict_ok']) for r in rs)}/{len(rs)} "
            f"| {sum(bool(r['rule_ok']) for r in rs)}/{len(rs)} "
            f"| {sum(bool(r['fix_ok']) for r in scored)}/{len(scored)} |"
        )
    for r in sorted(runs, key=lambda r: (r["condition"], r["name"])):
        if not (r["verdict_ok"] and r["rule_ok"] and r["fix_ok"] is not False):
            print(
                f"- {r['condition']} {r['name']}: answered {r['verdict']} ({r['verdict_rule']}), "
                f"judged {r['judged_rule']}, first fix: {r['first_fix'] or 'none'}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
