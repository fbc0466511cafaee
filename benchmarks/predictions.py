"""Predicted vs measured speed-up of each scenario's own fix (`ddpdoctor run --try RULE`).

For every 2-rank CPU scenario in examples/scenarios/ whose expected rule is a rule id, runs

    ddpdoctor run --try RULE --repeat N --out TMP -- torchrun --standalone --nproc_per_node=2 SCENARIO

i.e. the baseline, its diagnosis, that rule's first fix applied inside the ranks, both arms interleaved,
and tabulates the prediction (the finding's upper bound 1/(1 - cost)) against the measured speed-up and
its 95 % interval. A first fix that is a code change is listed as such (run cannot apply it). Writes the
table into docs/ACCURACY.md between the predictions markers (benchmarks/accuracy.py keeps that block).

    python benchmarks/predictions.py [--repeat 2] [--only NAME] [--try-example PATH:RULE[:CHANGE]] [--note TEXT]

``--try-example`` adds a job outside the scenario matrix (e.g. ``examples/comm_heavy.py:CM001``, or with a
change of its own, ``examples/comm_heavy.py:CM001:ddp.comm_hook=fp16``: every fix run can apply can be tried,
not only a finding's first). With ``--only`` or ``--try-example`` the rows not run again are kept from the
table already in the file, each with the date and commit it was recorded at.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import accuracy

DOC = ROOT / "docs" / "ACCURACY.md"


class Example:
    """A job outside the scenario matrix: PATH:RULE[:CHANGE]."""

    def __init__(self, spec: str):
        path, _, rest = spec.partition(":")
        rule, _, change = rest.partition(":")
        if not path or not rule:
            raise SystemExit(f"predictions: --try-example {spec!r}: expected PATH:RULE[:CHANGE]")
        self.path, self.rule, self.change = str((ROOT / path).resolve()), rule, change or None
        self.name = Path(path).stem


def run_one(exp, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"pred_{exp.name}_") as tmp:
        out = Path(tmp) / "trial"
        tried = getattr(exp, "change", None) or exp.rule
        cmd = [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--try",
            tried,
            "--repeat",
            str(repeat),
            "--out",
            str(out),
            "--",
            "torchrun",
            "--standalone",
            "--nproc_per_node=2",
            exp.path,
        ]
        t0 = time.monotonic()
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=tmp)
        rec = {"name": exp.name, "rule": exp.rule, "seconds": round(time.monotonic() - t0, 1)}
        if (out / "trial.json").is_file():
            t = json.loads((out / "trial.json").read_text(encoding="utf-8"))
            rec.update(
                {
                    k: t.get(k)
                    for k in (
                        "change",
                        "measured_speedup",
                        "ci95",
                        "median_speedup",
                        "predicted_speedup",
                        "predicted_by",
                        "baseline_verdict",
                        "try_verdict",
                        "failed_arm",
                    )
                }
            )
        else:
            why = [ln for ln in res.stderr.splitlines() if ln.startswith("ddpdoctor: error:")]
            rec["not_applicable"] = (
                why[-1].split("error:", 1)[1].strip() if why else f"exit {res.returncode}: {res.stderr.strip()[-200:]}"
            )
        return rec


def _x(v) -> str:
    return "–" if v is None else f"{v:.2f}x"


ROW = re.compile(r"^\| (?P<name>[^|]+?) \| (?P<rule>[^|]+?) \| (?P<change>[^|]*?) \|")


def earlier_rows(path: Path = DOC) -> list[tuple[str, str]]:
    """((scenario, change) key, Markdown row) of the table already in the file, each row ending with the date
    and commit it was recorded at (rows of a table from before that column get the block's own)."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    start, end = text.find(accuracy.PREDICTIONS[0]), text.find(accuracy.PREDICTIONS[1])
    if not 0 <= start < end:
        return []
    block = text[start:end]
    m = re.search(r"Date \(UTC\): ([0-9-]+) [0-9:]+; commit `([0-9a-f]+)`", block)
    when = f"{m.group(1)}, `{m.group(2)}`" if m else "earlier"
    out = []
    for line in block.splitlines():
        r = ROW.match(line)
        if not r or r.group("name") in ("scenario", "---"):
            continue
        cells = line.strip().strip("|").split("|")
        if len(cells) == 7:
            line = line.rstrip() + f" {when} |"
        out.append(((r.group("name"), _change_key(r.group("change"))), line))
    return out


def _change_key(cell: str) -> str:
    return "not tried" if cell.startswith("not tried") else cell.strip()


def render(rows: list[dict], meta: dict, kept: list[tuple[tuple[str, str], str]] = ()) -> str:
    lines = [
        accuracy.PREDICTIONS[0],
        "",
        "## Predicted vs measured: each scenario's own fix, tried",
        "",
        "Generated by `benchmarks/predictions.py`; do not edit by hand.",
        "",
        f"- Date (UTC): {meta['date']}; commit `{meta['commit']}`; {meta['machine']}; wall time {meta['minutes']} min",
        f"- Command: `{meta['command']}`",
    ]
    if meta.get("note"):
        lines.append(f"- Note: {meta['note']}")
    lines += [
        "- Predicted: what `run --try` prints beside its measurement (ddpdoctor/trial/predict.py, the same number "
        "the card reads): the finding's upper bound 1/(1 − cost) from the baseline's diagnosis, or, for a bucket "
        "size or a 16-bit hook, the model of the messages CM001 measured. Measured: mean "
        "baseline step / mean step with the change (the job's time per step), interleaved arms "
        "(`ddpdoctor run --try RULE`); interval: bootstrap 95 % over the recorded steps. Typical step: the "
        "same ratio of medians.",
        "",
        "| scenario | rule | change tried | predicted | measured (95 %) | typical step | verdict before → after | recorded |",
        "|---|---|---|---|---|---|---|---|",
    ]
    when = f"{meta['date'].split()[0]}, `{meta['commit']}`"
    fresh = []
    for r in rows:
        if r.get("not_applicable"):
            fresh.append(
                (
                    (r["name"], "not tried"),
                    f"| {r['name']} | {r['rule']} | not tried: {r['not_applicable']} | – | – | – | – | {when} |",
                )
            )
            continue
        change = ", ".join(f"`{k}={v}`" for k, v in (r.get("change") or {}).items())
        ci = r.get("ci95")
        meas = (
            "failed arm: " + r["failed_arm"]
            if r.get("failed_arm")
            else (f"{_x(r.get('measured_speedup'))} ({ci[0]:.2f}–{ci[1]:.2f})" if ci else _x(r.get("measured_speedup")))
        )
        fresh.append(
            (
                (r["name"], change),
                f"| {r['name']} | {r['rule']} | {change} | {_x(r.get('predicted_speedup'))} | "
                f"{meas} | {_x(r.get('median_speedup'))} | {r.get('baseline_verdict')} → "
                f"{r.get('try_verdict')} | {when} |",
            )
        )
    ran = {k for k, _ in fresh}
    ran_names = {k[0] for k in ran}
    # an earlier row goes when the same change ran again, or when it said "not tried" for a job that ran now
    keep = [(k, line) for k, line in kept if k not in ran and not (k[1] == "not tried" and k[0] in ran_names)]
    lines += [line for _k, line in sorted(keep + fresh, key=lambda kl: kl[0])]
    lines += ["", accuracy.PREDICTIONS[1]]
    return "\n".join(lines) + "\n"


def write_block(block: str, path: Path = DOC) -> None:
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    start, end = text.find(accuracy.PREDICTIONS[0]), text.find(accuracy.PREDICTIONS[1])
    if 0 <= start < end:
        text = text[:start] + block.rstrip("\n") + text[end + len(accuracy.PREDICTIONS[1]) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--only", action="append", default=[])
    p.add_argument("--try-example", action="append", default=[], metavar="PATH:RULE[:CHANGE]")
    p.add_argument("--note", default="")
    p.add_argument("--out", default=str(DOC), help="the Markdown file to write the block into ('-' prints it)")
    args = p.parse_args(argv)
    exps = [e for e in accuracy.load_scenarios() if not e.rule.startswith("category:")]
    if args.only or args.try_example:
        exps = [e for e in exps if any(o in e.name for o in args.only)]
    exps += [Example(spec) for spec in args.try_example]
    if not exps:
        print("predictions: no scenario matches", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    meta = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "commit": accuracy._git_commit(),
        "machine": f"{os.cpu_count()} CPU(s), {sys.platform}",
        "note": args.note,
        "command": "python benchmarks/predictions.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    rows = []
    for e in exps:
        r = run_one(e, args.repeat)
        rows.append(r)
        print(
            f"  {e.name:30} {r['rule']:6} {r.get('not_applicable') or (_x(r.get('predicted_speedup')) + ' predicted, ' + _x(r.get('measured_speedup')) + ' measured')}",
            flush=True,
        )
    meta["minutes"] = round((time.monotonic() - t0) / 60)
    kept = earlier_rows(Path(args.out)) if (args.only or args.try_example) and args.out != "-" else []
    block = render(rows, meta, kept)
    if args.out == "-":
        print(block)
    else:
        write_block(block, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
