"""Runs the hostile corpus (cases.py) against analyze, report, bundle and compare: every
command ends with an allowed exit code, within its time and memory limits, with at most one
error line and no traceback, and no planted secret or terminal escape in any output."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from cases import Case, build_cases
from subprocesses import project_env

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(os, "mkfifo"), reason="needs POSIX fork/mkfifo"),
    pytest.mark.live,  # 150+ ddpdoctor processes end to end (10+ minutes on a loaded host): not the fast tier
]


def _output_texts(case: Case, out_dir: Path) -> list[tuple[str, bytes]]:
    texts = [("stdout", (out_dir / "stdout").read_bytes()), ("stderr", (out_dir / "stderr").read_bytes())]
    for o in map(Path, case.outputs):
        if o.is_dir():
            texts += [(str(p), p.read_bytes()) for p in o.rglob("*") if p.is_file()]
        elif o.is_file():
            texts.append((str(o), o.read_bytes()))
            if o.name.endswith((".tar.gz", ".tgz")):
                with tarfile.open(o) as tf:
                    for m in tf.getmembers():
                        texts.append((f"{o}:{m.name}", m.name.encode()))
                        if m.isfile():
                            texts.append((f"{o}:{m.name}", tf.extractfile(m).read()))
    return texts


def check(case: Case, res: dict, out_dir: Path) -> list[str]:
    problems = []
    if res["timed_out"]:
        return [f"timed out after {case.timeout_s}s"]
    if res["rc"] not in case.expect:
        problems.append(f"exit {res['rc']}, expected {case.expect}")
    err = (out_dir / "stderr").read_text(errors="replace")
    if "Traceback" in err:
        problems.append("traceback on stderr")
    errors = [line for line in err.splitlines() if line.startswith(("ddpdoctor: error", "Error: "))]
    if res["rc"] == 3 and errors:  # FAILED_RUN: the job failed, ddpdoctor did not: no error line
        problems.append(f"exit 3 (failed run) with error lines: {errors[:2]!r}")
    if res["rc"] not in (0, 3) and (len(errors) != 1 or "\n" in errors[0]):
        problems.append(f"{len(errors)} error lines: {err[-300:]!r}")
    said = " ".join(((out_dir / "stdout").read_text(errors="replace") + err).split())  # wrapped lines joined
    if case.said and case.said not in said:
        problems.append(f"does not say {case.said!r}: {err[-300:]!r}")
    if res["peak_mib"] > case.rss_mb:
        problems.append(f"peak RSS {res['peak_mib']} MiB")
    texts = _output_texts(case, out_dir)
    for s in case.secrets:
        leaked = [name for name, data in texts if s.encode() in data]
        if leaked:
            problems.append(f"secret {s[:12]}… in {leaked}")
    if case.no_escapes:
        bad = [
            name
            for name, data in texts
            if name.endswith(("report.md", "report.html")) and (b"\x1b" in data or "\x9b".encode() in data)
        ]
        if bad:
            problems.append(f"terminal escape in {bad}")
    return problems


def test_hostile_corpus(tmp_path):
    cases = build_cases(tmp_path / "corpus")
    assert len(cases) >= 150
    runs = []
    for i, c in enumerate(cases):
        runs.append(
            {
                "id": c.id,
                "argv": c.argv,
                "cwd": str(tmp_path),
                "out_dir": str(tmp_path / "runs" / str(i)),
                "timeout_s": c.timeout_s,
                "mem_mb": c.mem_mb,
                "env": c.env,
            }
        )
    threads = dict(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MALLOC_ARENA_MAX="2")
    env = project_env(dict(threads, PYTHONPATH=os.pathsep.join([str(HERE.parent.parent)] + sys.path)))
    env.pop("DDPDOCTOR_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, str(HERE / "runner.py")],
        input=json.dumps(runs),
        capture_output=True,
        text=True,
        env=env,
        timeout=sum(c.timeout_s for c in cases) + 60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(cases), proc.stderr[-2000:]
    table: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    failures = []
    for i, (c, r) in enumerate(zip(cases, results)):
        probs = check(c, r, tmp_path / "runs" / str(i))
        table[c.category][0] += 1
        table[c.category][1] += not probs
        if probs:
            failures.append(f"{c.id}: {'; '.join(probs)} ({r['seconds']}s, {r['peak_mib']} MiB)")
    summary = {k: {"cases": v[0], "pass": v[1]} for k, v in sorted(table.items())}
    summary["_max_seconds"] = max(r["seconds"] for r in results)
    summary["_max_peak_mib"] = max(r["peak_mib"] for r in results)
    if os.environ.get("DDPDOCTOR_HOSTILE_SUMMARY"):
        Path(os.environ["DDPDOCTOR_HOSTILE_SUMMARY"]).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    assert not failures, "\n".join(failures)
