"""Scenario matrix: how often is ddpdoctor's verdict (and its first fix) right?

Runs every scenario in examples/scenarios/ (2-rank CPU/gloo jobs, one cause each, expected
answer in a ``# expect-…`` header) under

    ddpdoctor run --no-analyze --out TMP -- torchrun --standalone --nproc_per_node=2 SCENARIO
    ddpdoctor analyze -q --json TMP/diagnosis.json TMP

--repeat times, on the idle machine and/or beside a CPU-burning process (one core spinning,
started before and killed after each job), plus the synthetic GPU scenarios listed in
benchmarks/scenarios_synthetic.toml when that file exists. Writes docs/ACCURACY.md (and the
raw results with --json).

    python benchmarks/accuracy.py                       # 3 repeats, idle and busy
    python benchmarks/accuracy.py --idle --repeat 1 --only dl_decode_workers0

Scoring, per run (see docs/ACCURACY.md for the same text):
* verdict right: the JSON ``verdict.bottleneck`` (``none`` when null; ``failure`` when
  ``verdict.failed`` is true) equals expect-verdict;
* rule right: expect-rule ``ID`` is the verdict's rule, or for a rule outside the verdict
  categories (config, failure, …) a finding with that id exists; ``category:X`` means a
  finding of category X exists (and is the verdict's when X is a verdict category); and
  no finding of an expect-absent rule exists;
* first fix right: the first fix of that finding (the verdict's finding when the rule was
  wrong) contains expect-first-fix (case-sensitive) in its title, change, knob or value;
  ``-`` means any first fix is acceptable (not scored).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO_DIR = ROOT / "examples" / "scenarios"
SYNTHETIC_TOML = ROOT / "benchmarks" / "scenarios_synthetic.toml"
VERDICTS = ("dataloader", "communication", "compute", "imbalance", "failure", "none")
VERDICT_CATEGORIES = ("dataloader", "communication", "compute", "imbalance")
HEADER_KEYS = ("verdict", "rule", "first-fix", "absent")
CONDITIONS = ("idle", "busy")
JOB_TIMEOUT_S = 180
# wall seconds per two-rank CPU job (run + analyze) on an idle 2-core machine, measured: acc43 (docs/ACCURACY.md,
# ccf177e) took 20 min of wall time for 130 CPU runs and 14 synthetic ones, (1200 - 14 x 3) / 130 = 8.9 s; its
# s/run column (the job alone) averages 6.6 s idle and 8.4 s busy. A host loaded by other work is slower
# (blind round 5's first sight, load average 10-18: 25-51 s per job)
SECONDS_PER_CPU_RUN = 9.0
SECONDS_PER_SYNTH_RUN = 3.0


class HeaderError(ValueError):
    pass


@dataclass
class Expectation:
    name: str
    kind: str  # "cpu" (a script under examples/scenarios) | "synthetic"
    verdict: str
    rule: str  # rule id or "category:<name>"
    first_fix: str  # substring, or "-" (not scored)
    absent: list[str] = field(default_factory=list)
    path: str = ""  # the script (cpu) or "" (synthetic)
    synth: dict = field(default_factory=dict)  # scenario args for ddpdoctor_synth


def parse_header(path: Path) -> Expectation:
    """Read the ``# expect-<key>: value`` lines at the top of a scenario script."""
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].strip().partition(":")
        if not sep or not key.startswith("expect-"):
            continue
        key = key[len("expect-") :].strip()
        if key not in HEADER_KEYS:
            raise HeaderError(f"{path.name}: unknown header key expect-{key}")
        found[key] = value.strip()
    for key in ("verdict", "rule", "first-fix"):
        if not found.get(key):
            raise HeaderError(f"{path.name}: header line '# expect-{key}: …' missing")
    exp = Expectation(
        name=path.stem,
        kind="cpu",
        verdict=found["verdict"],
        rule=found["rule"],
        first_fix=found["first-fix"],
        absent=found.get("absent", "").split(),
        path=str(path),
    )
    validate(exp)
    return exp


def validate(exp: Expectation) -> None:
    if exp.verdict not in VERDICTS:
        raise HeaderError(f"{exp.name}: verdict {exp.verdict!r} is not one of {', '.join(VERDICTS)}")
    if exp.rule.startswith("category:"):
        if not exp.rule[len("category:") :]:
            raise HeaderError(f"{exp.name}: empty category in rule {exp.rule!r}")
    elif not (exp.rule[:2].isalpha() and exp.rule[2:].isdigit() or exp.rule[:3].isalpha() and exp.rule[3:].isdigit()):
        raise HeaderError(f"{exp.name}: rule {exp.rule!r} is neither a rule id (e.g. DL001) nor category:<name>")


def load_scenarios(folder: Path = SCENARIO_DIR) -> list[Expectation]:
    return [parse_header(p) for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]


def _synth_args(entry: dict, base: Path) -> dict:
    """The ddpdoctor_synth scenario of one entry: a table under ``args``/``scenario``/``synth``,
    a path to a scenario TOML there (relative to the list, the repo, or ddpdoctor_synth/scenarios/),
    or the entry's own non-``expected_*`` keys."""
    spec = next((entry[k] for k in ("args", "scenario", "synth") if k in entry), None)
    if isinstance(spec, dict):
        return dict(spec)
    if isinstance(spec, str):
        for cand in (
            base / spec,
            ROOT / spec,
            ROOT / "ddpdoctor_synth" / "scenarios" / spec,
            ROOT / "ddpdoctor_synth" / "scenarios" / f"{spec}.toml",
        ):
            if cand.is_file():
                with open(cand, "rb") as fh:
                    d = tomllib.load(fh)
                d.setdefault("name", cand.stem)
                return d
        raise HeaderError(f"synthetic scenario {entry.get('name')!r}: no scenario file {spec!r}")
    return {k: v for k, v in entry.items() if not k.startswith("expected")}


def load_synthetic(path: Path = SYNTHETIC_TOML) -> list[Expectation]:
    if not path.is_file():
        return []
    with open(path, "rb") as fh:
        doc = tomllib.load(fh)
    entries = next((v for v in doc.values() if isinstance(v, list) and v and isinstance(v[0], dict)), [])
    out = []
    for e in entries:
        if "name" not in e or "expected_verdict" not in e:
            raise HeaderError(f"{path.name}: every entry needs name and expected_verdict ({e!r:.80})")
        exp = Expectation(
            name=f"synth:{e['name']}",
            kind="synthetic",
            verdict=str(e["expected_verdict"]),
            rule=str(e.get("expected_rule") or f"category:{e['expected_verdict']}"),
            first_fix=str(e.get("expected_first_fix_contains") or "-"),
            absent=list(e.get("expected_absent", [])),
            synth=_synth_args(e, path.parent),
        )
        validate(exp)
        out.append(exp)
    return out


# ---------------------------------------------------------------- scoring


def _fix_text(fix: dict) -> str:
    return "\n".join(str(fix.get(k) or "") for k in ("title", "change", "knob", "value"))


def score(exp: Expectation, diag: dict) -> dict:
    """Compare one diagnosis (the ``analyze --json`` dict) with the expectation."""
    verdict = diag.get("verdict") or {}
    # a run that failed is a "failure" verdict (the JSON keeps the window's performance bottleneck beside it)
    seen_verdict = "failure" if verdict.get("failed") else (verdict.get("bottleneck") or "none")
    findings = diag.get("findings") or []
    by_rule = {f.get("rule"): f for f in findings}
    verdict_finding = by_rule.get(verdict.get("rule"))
    if verdict.get("failed"):  # the card leads a failed run with its failure finding, not the window's bottleneck
        verdict_finding = next((f for f in findings if f.get("category") == "failure"), verdict_finding)
    focus = None
    if exp.rule.startswith("category:"):
        cat = exp.rule[len("category:") :]
        if cat in VERDICT_CATEGORIES:
            focus = verdict_finding if verdict_finding and verdict_finding.get("category") == cat else None
        else:
            focus = next((f for f in findings if f.get("category") == cat), None)
    else:
        f = by_rule.get(exp.rule)
        if f is not None and (f.get("category") not in VERDICT_CATEGORIES or verdict.get("rule") == exp.rule):
            focus = f
    present_absent = [r for r in exp.absent if r in by_rule]
    rule_ok = focus is not None and not present_absent
    judged = focus or verdict_finding or (findings[0] if findings else None)
    fixes = (judged or {}).get("fixes") or []
    first_fix = fixes[0] if fixes else None
    if exp.first_fix == "-":
        fix_ok = None
    else:
        fix_ok = bool(first_fix) and exp.first_fix in _fix_text(first_fix)
    return {
        "verdict": seen_verdict,
        "verdict_ok": seen_verdict == exp.verdict,
        "verdict_rule": verdict.get("rule"),
        "label": verdict.get("label"),
        "confidence": verdict.get("confidence_label"),
        "rule_ok": rule_ok,
        "judged_rule": (judged or {}).get("rule"),
        "first_fix": (first_fix or {}).get("title"),
        "fix_ok": fix_ok,
        "unwanted": present_absent,
        "findings": [f.get("rule") for f in findings],
    }


def evidence(diag: dict) -> dict:
    """The breakdown numbers that show the scenario's mechanism happened."""
    an = diag.get("analysis") or {}
    ranks = an.get("ranks") or {}
    out = {"ranks": {}}
    for r, info in sorted(ranks.items()):
        share = info.get("share") or {}
        steps = info.get("steps") or 0
        out["ranks"][r] = {
            "step_ms": round(((info.get("mean_us") or {}).get("step_time") or 0.0) / 1000, 2),
            "collectives_per_step": round(info.get("collectives", 0) / steps, 1) if steps else None,
            **{
                c: share.get(c)
                for c in ("dataloader_wait", "compute", "comm", "comm_exposed", "comm_sync_wait", "other")
            },
        }
    facts = diag.get("facts") or {}
    for k in (
        "train.micro_batches_per_step",
        "train.synced_micro_batches_per_step",
        "cross.imbalance_score",
        "python.extra_work.where",
        "python.input_work.share",
        "host.contention.threads_per_cpu",
    ):
        if k in facts:
            out[k] = facts[k]
    # the ranked list the verdict was read from (rule, cost, material, eligible)
    out["costs"] = [
        [c.get("rule"), c.get("cost"), c.get("material"), c.get("eligible")] for c in diag.get("costs") or []
    ]
    return out


# ---------------------------------------------------------------- running


class CpuBurner:
    """One process spinning on one core for the duration of a job."""

    def __init__(self, on: bool):
        self.on, self.proc = on, None

    def __enter__(self):
        if self.on:
            self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def _ddpdoctor() -> list[str]:
    return [sys.executable, "-m", "ddpdoctor"]


def run_cpu(exp: Expectation, work: Path, busy: bool) -> tuple[dict | None, str, float]:
    out = work / "bundle"
    cmd = _ddpdoctor() + [
        "run",
        "--no-analyze",
        "--out",
        str(out),
        "--",
        "torchrun",
        "--standalone",
        "--nproc_per_node=2",
        exp.path,
    ]
    t0 = time.monotonic()
    with CpuBurner(busy):
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, cwd=work)
        except subprocess.TimeoutExpired:
            return None, f"timeout after {JOB_TIMEOUT_S} s", time.monotonic() - t0
    seconds = time.monotonic() - t0
    if res.returncode != 0 and not (out / "ranks").is_dir():
        return None, f"run exit {res.returncode}: {res.stderr.strip().splitlines()[-1:]}", seconds
    return analyze(out, work), "", seconds


def analyze(folder: Path, work: Path) -> dict | None:
    js = work / "diagnosis.json"
    res = subprocess.run(
        _ddpdoctor() + ["analyze", "-q", "--json", str(js), str(folder)],
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT_S,
    )
    if not js.is_file():
        raise RuntimeError(f"analyze wrote no JSON (exit {res.returncode}): {res.stderr.strip()[-300:]}")
    return json.loads(js.read_text(encoding="utf-8"))


def run_synthetic(exp: Expectation, work: Path, busy: bool) -> tuple[dict | None, str, float]:
    sys.path.insert(0, str(ROOT))
    from ddpdoctor_synth import generate, scenario_from_dict

    t0 = time.monotonic()
    with CpuBurner(busy):
        traces = work / "traces"
        generate(scenario_from_dict(exp.synth), str(traces), gzip=False)
        diag = analyze(traces, work)
    return diag, "", time.monotonic() - t0


def run_one(exp: Expectation, condition: str, repeat: int, keep: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"acc_{exp.name}_") as tmp:
        runner = run_cpu if exp.kind == "cpu" else run_synthetic
        try:
            diag, error, seconds = runner(exp, Path(tmp), condition == "busy")
        except Exception as e:  # noqa: BLE001 - one broken run is a result, not the end of the matrix
            diag, error, seconds = None, f"{type(e).__name__}: {e}", 0.0
        if keep is not None:  # the bundle and diagnosis, to look at a surprising run
            shutil.copytree(tmp, keep / f"{exp.name}-{condition}-{repeat}", dirs_exist_ok=True)
    rec = {
        "name": exp.name,
        "kind": exp.kind,
        "condition": condition,
        "repeat": repeat,
        "seconds": round(seconds, 1),
        "error": error,
    }
    if diag is None:
        rec.update(
            {
                "verdict": "error",
                "verdict_ok": False,
                "rule_ok": False,
                "fix_ok": None if exp.first_fix == "-" else False,
                "findings": [],
                "evidence": {},
            }
        )
    else:
        rec.update(score(exp, diag))
        rec["evidence"] = evidence(diag)
    return rec


# ---------------------------------------------------------------- tables


def summarize(expectations: list[Expectation], results: list[dict]) -> tuple[list[dict], dict]:
    """One row per scenario x condition, and totals per condition."""
    rows = []
    for exp in expectations:
        for cond in CONDITIONS:
            runs = [r for r in results if r["name"] == exp.name and r["condition"] == cond]
            if not runs:
                continue
            verdicts = [r["verdict"] for r in runs]
            fixes = [r["fix_ok"] for r in runs if r["fix_ok"] is not None]
            rows.append(
                {
                    "name": exp.name,
                    "kind": exp.kind,
                    "condition": cond,
                    "expected": exp.verdict,
                    "expected_rule": exp.rule,
                    "expected_fix": exp.first_fix,
                    "runs": len(runs),
                    "verdicts": verdicts,
                    "verdict_right": sum(r["verdict_ok"] for r in runs),
                    "rule_right": sum(r["rule_ok"] for r in runs),
                    "fix_right": sum(fixes) if fixes else None,
                    "fix_scored": len(fixes),
                    # a run that failed to record gave no verdict: the scenario did not repeat its answer
                    "repeatable": len(set(verdicts)) == 1 and "error" not in verdicts,
                    "rules": sorted({str(r.get("judged_rule")) for r in runs}),
                    "first_fixes": sorted({str(r.get("first_fix")) for r in runs}),
                    "seconds": round(sum(r["seconds"] for r in runs) / len(runs), 1),
                    "evidence": evidence_line(runs[0].get("evidence") or {}),
                }
            )
    totals = {}
    for cond in CONDITIONS:
        sel = [r for r in results if r["condition"] == cond]
        if not sel:
            continue
        fixes = [r["fix_ok"] for r in sel if r["fix_ok"] is not None]
        crow = [row for row in rows if row["condition"] == cond]
        totals[cond] = {
            "runs": len(sel),
            "verdict_accuracy": sum(r["verdict_ok"] for r in sel) / len(sel),
            "rule_accuracy": sum(r["rule_ok"] for r in sel) / len(sel),
            "first_fix_accuracy": (sum(fixes) / len(fixes)) if fixes else None,
            "first_fix_scored": len(fixes),
            "repeatability": sum(row["repeatable"] for row in crow) / len(crow) if crow else None,
            "scenarios": len(crow),
        }
    return rows, totals


def evidence_line(ev: dict) -> str:
    """One run's mechanism numbers: per-rank step time, shares and collectives per step."""
    parts = []
    for r, v in sorted((ev.get("ranks") or {}).items()):
        shares = ", ".join(
            f"{k.replace('_wait', '').replace('comm_exposed', 'exposed comm').replace('comm_sync', 'sync wait')}"
            f" {100 * v[k]:.0f}%"
            for k in ("dataloader_wait", "compute", "comm_exposed", "comm_sync_wait", "other")
            if isinstance(v.get(k), (int, float)) and v[k] >= 0.05
        )
        parts.append(f"r{r}: {v.get('step_ms')} ms, {v.get('collectives_per_step')} coll/step; {shares}")
    extra = [f"{k}={ev[k]}" for k in sorted(ev) if k != "ranks"]
    return " / ".join(parts + extra)


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.0f} %"


def _frac(n, d) -> str:
    return "–" if n is None or not d else f"{n}/{d}"


def render_markdown(rows: list[dict], totals: dict, meta: dict) -> str:
    out = [
        "# Verdict accuracy on the scenario matrix",
        "",
        "Generated by `benchmarks/accuracy.py`; do not edit by hand.",
        "",
    ]
    out += [
        f"- Date (UTC): {meta.get('date', '?')}",
        f"- Commit: `{meta.get('commit', '?')}`",
        f"- Command: `{meta.get('command', '?')}`",
        f"- Machine: {meta.get('machine', '?')}",
    ]
    if meta.get("wall_seconds") is not None:
        out.append(f"- Wall time: {meta['wall_seconds'] / 60:.0f} min")
    if meta.get("note"):
        out.append(f"- Note: {meta['note']}")
    out += [
        "",
        "## Totals",
        "",
        "| condition | runs | scenarios | verdict accuracy | rule accuracy | first-fix accuracy (scored runs) | repeatable scenarios |",
        "|---|---|---|---|---|---|---|",
    ]
    for cond, t in totals.items():
        out.append(
            f"| {cond} | {t['runs']} | {t['scenarios']} | {_pct(t['verdict_accuracy'])} | {_pct(t['rule_accuracy'])} | "
            f"{_pct(t['first_fix_accuracy'])} ({t['first_fix_scored']}) | {_pct(t['repeatability'])} |"
        )
    out += [
        "",
        "## Per scenario",
        "",
        "Verdicts seen: one per repeat, in order. Rule: the rule of the finding the first fix was judged on. "
        "A first-fix cell is `–` when the scenario accepts any fix.",
        "",
        "| scenario | cond. | expected | verdicts seen | verdict right | rule (expected) | rule right | first fix (expected substring) | first fix right | repeatable | s/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fixes = "; ".join(r["first_fixes"]).replace("|", "\\|")
        out.append(
            f"| {r['name']} | {r['condition']} | {r['expected']} | {', '.join(r['verdicts'])} | "
            f"{_frac(r['verdict_right'], r['runs'])} | {', '.join(r['rules'])} ({r['expected_rule']}) | "
            f"{_frac(r['rule_right'], r['runs'])} | {fixes} (`{r['expected_fix']}`) | "
            f"{_frac(r['fix_right'], r['fix_scored'])} | {'yes' if r['repeatable'] else 'NO'} | {r['seconds']} |"
        )
    out += [
        "",
        "## Mechanism evidence",
        "",
        "From the first repeat of each scenario and condition: per rank the mean step time, collectives per "
        "step and the step-time shares of 5 % or more (dataloader wait, compute, exposed communication, "
        "sync wait inside collectives, other).",
        "",
        "| scenario | cond. | evidence |",
        "|---|---|---|",
    ]
    for r in rows:
        out.append(f"| {r['name']} | {r['condition']} | {r.get('evidence', '')} |")
    out += [
        "",
        "## How runs are scored",
        "",
        __doc__.split("Scoring, per run (see docs/ACCURACY.md for the same text):")[1].strip(),
        "",
    ]
    return "\n".join(out)


# ---------------------------------------------------------------- main

PREDICTIONS = ("<!-- predictions:start -->", "<!-- predictions:end -->")
ABLATION = ("<!-- ablation:start -->", "<!-- ablation:end -->")


def write_markdown(path: Path, text: str) -> None:
    """Write the table, keeping the blocks benchmarks/predictions.py and benchmarks/ablation.py write
    between their markers."""
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    for a, b in (PREDICTIONS, ABLATION):
        start, end = old.find(a), old.find(b)
        if 0 <= start < end:
            text = text.rstrip("\n") + "\n\n" + old[start : end + len(b)] + "\n"
    path.write_text(text, encoding="utf-8")


def _git_commit() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        return sha + ("+uncommitted changes" if dirty else "") if sha else "unknown"
    except OSError:
        return "unknown"


def estimate_seconds(expectations: list[Expectation], conditions: list[str], repeat: int) -> float:
    per = sum(SECONDS_PER_CPU_RUN if e.kind == "cpu" else SECONDS_PER_SYNTH_RUN for e in expectations)
    return per * repeat * len(conditions)


def reanalyze(kept: list[Path], only: list[str], json_out: str | None = None) -> int:
    """Analyze kept bundles again and print how each is scored now (and what it was); the kept folders are
    only read (the analysis writes into a temporary folder). ``json_out``: each run's score, now and then."""
    exps = {e.name: e for e in load_scenarios()}
    right = total = fixes_right = fixes_scored = 0
    runs: list[dict] = []
    for root in kept:
        for run in sorted(p for p in root.iterdir() if (p / "bundle").is_dir()):
            name, cond, rep = run.name.rsplit("-", 2)
            if name not in exps or (only and not any(o in name for o in only)):
                continue
            before = (
                json.loads((run / "diagnosis.json").read_text(encoding="utf-8"))
                if (run / "diagnosis.json").is_file()
                else {}
            )
            with tempfile.TemporaryDirectory() as tmp:
                diag = analyze(run / "bundle", Path(tmp))
            s = score(exps[name], diag)
            then = score(exps[name], before) if before else None
            total += 1
            right += s["verdict_ok"]
            fixes_scored += s["fix_ok"] is not None
            fixes_right += bool(s["fix_ok"])
            was = then["verdict"] if then else "not kept"
            print(
                f"  {cond:4} #{rep} {name:28} {'ok ' if s['verdict_ok'] else 'BAD'} {s['verdict']:13} "
                f"(was {was}) rule={s['judged_rule']} fix={'-' if s['fix_ok'] is None else s['fix_ok']}"
                f" first fix: {s['first_fix']}",
                flush=True,
            )
            runs.append({"scenario": name, "condition": cond, "repeat": rep, "now": s, "then": then})
    print(f"re-analyzed: verdict right in {right} of {total}; first fix right in {fixes_right} of {fixes_scored}")
    if json_out:
        meta = {"commit": _git_commit(), "kept": [str(k) for k in kept], "date": time.strftime("%Y-%m-%d %H:%M")}
        Path(json_out).write_text(json.dumps({"meta": meta, "runs": runs}, indent=1), encoding="utf-8")
    return 0 if total else 2


def rerender(path: Path, out: str) -> int:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        exps = [Expectation(**e) for e in raw["expectations"]]
        rows, totals = summarize(exps, raw["results"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"accuracy: cannot read {path}: {e}", file=sys.stderr)
        return 2
    text = render_markdown(rows, totals, raw.get("meta") or {})
    if out == "-":
        print(text)
    else:
        write_markdown(Path(out), text)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--idle", action="store_const", dest="conditions", const=["idle"])
    g.add_argument("--busy", action="store_const", dest="conditions", const=["busy"])
    g.add_argument("--both", action="store_const", dest="conditions", const=["idle", "busy"])
    p.add_argument(
        "--only", action="append", default=[], help="run only scenarios whose name contains this (repeatable)"
    )
    p.add_argument("--no-synthetic", action="store_true", help="skip benchmarks/scenarios_synthetic.toml")
    p.add_argument("--out", default=str(ROOT / "docs" / "ACCURACY.md"), help="Markdown table to write ('-' for none)")
    p.add_argument("--json", help="also write the raw per-run results here")
    p.add_argument("--note", default="", help="a sentence on the conditions, printed under the header")
    p.add_argument("--from-json", help="re-render the Markdown from a --json file of an earlier run (runs nothing)")
    p.add_argument("--keep", help="keep every run's bundle and diagnosis.json under this folder")
    p.add_argument(
        "--reanalyze",
        action="append",
        default=[],
        metavar="KEPT",
        help="score the bundles an earlier --keep run kept, analyzed again with this code "
        "(records nothing: tells a change of the verdict logic from recording noise; repeatable)",
    )
    args = p.parse_args(argv)
    if args.reanalyze:
        return reanalyze([Path(k) for k in args.reanalyze], args.only, args.json)
    keep = Path(args.keep) if args.keep else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        return rerender(Path(args.from_json), args.out)
    conditions = args.conditions or ["idle", "busy"]
    if args.repeat < 1:
        print("accuracy: --repeat must be at least 1", file=sys.stderr)
        return 2
    try:
        expectations = load_scenarios() + ([] if args.no_synthetic else load_synthetic())
    except (HeaderError, KeyError, tomllib.TOMLDecodeError) as e:
        print(f"accuracy: bad scenario header or synthetic list: {e}", file=sys.stderr)
        return 2
    if args.only:
        expectations = [e for e in expectations if any(o in e.name for o in args.only)]
    if not expectations:
        print("accuracy: no scenario matches --only", file=sys.stderr)
        return 2
    est = estimate_seconds(expectations, conditions, args.repeat)
    print(
        f"accuracy: {len(expectations)} scenario(s) x {args.repeat} repeat(s) x {len(conditions)} condition(s); "
        f"estimated {est / 60:.0f} min",
        flush=True,
    )
    results = []
    t0 = time.monotonic()
    started = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"), "commit": _git_commit()}
    for cond in conditions:
        for rep in range(args.repeat):
            for exp in expectations:
                rec = run_one(exp, cond, rep, keep)
                results.append(rec)
                mark = "ok " if rec["verdict_ok"] else "BAD"
                print(
                    f"  {cond:4} #{rep} {exp.name:28} {mark} {rec['verdict']:13} rule={rec.get('judged_rule')} "
                    f"fix={'-' if rec['fix_ok'] is None else rec['fix_ok']} {rec['seconds']}s {rec['error']}",
                    flush=True,
                )
    rows, totals = summarize(expectations, results)
    meta = {
        **started,
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, ROOT)] + sys.argv[1:]),
        "machine": f"{os.cpu_count()} CPU(s), {sys.platform}",
        "note": args.note,
        "wall_seconds": round(time.monotonic() - t0),
    }
    for cond, t in totals.items():
        print(
            f"{cond}: verdict {_pct(t['verdict_accuracy'])}, first fix {_pct(t['first_fix_accuracy'])}, "
            f"repeatable {_pct(t['repeatability'])} ({t['runs']} runs)"
        )
    if args.out != "-":
        write_markdown(Path(args.out), render_markdown(rows, totals, meta))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "meta": meta,
                    "expectations": [asdict(e) for e in expectations],
                    "results": results,
                    "rows": rows,
                    "totals": totals,
                },
                indent=1,
            ),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
