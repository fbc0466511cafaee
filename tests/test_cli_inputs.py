"""Bad input: one line on stderr, exit code 2, no traceback, no input file modified."""

import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tracebuilder import gpu_step_trace


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "ddpdoctor", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def digest(folder: Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_one_line_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    err = res.stderr.strip()
    assert "Traceback" not in res.stderr + res.stdout
    assert len(err.splitlines()) == 1, err
    assert err.startswith("ddpdoctor: error: ")
    for n in needles:
        assert n in err, err


def make_bad(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / "in"
    p.mkdir()
    good = json.dumps(gpu_step_trace().to_dict()).encode()
    if kind == "missing":
        return tmp_path / "does-not-exist"
    if kind == "empty folder":
        return p
    if kind == "not json":
        (p / "rank0.json").write_text("hello, not json")
    elif kind == "truncated json":
        (p / "rank0.json").write_bytes(good[: len(good) // 2])
    elif kind == "corrupt gzip":
        (p / "rank0.json.gz").write_bytes(gzip.compress(good)[:40] + b"garbage" * 50)
    elif kind == "not a trace":
        (p / "rank0.json").write_text(json.dumps({"hello": [1, 2, 3]}))
    elif kind == "empty file":
        (p / "rank0.json").write_bytes(b"")
    elif kind == "two runs claim one rank":
        gpu_step_trace(pid=111).write(p / "a_rank0.json")
        gpu_step_trace(pid=222).write(p / "b_rank0.json")
    elif kind == "unranked traces":
        gpu_step_trace(rank=None).write(p / "first.json")
        gpu_step_trace(rank=None).write(p / "second.json")
    elif kind == "rank beyond world size":
        gpu_step_trace(rank=0, world_size=2).write(p / "r0.json")
        gpu_step_trace(rank=5, world_size=2).write(p / "r5.json")
    return p


@pytest.mark.parametrize(
    "kind,needle",
    [
        ("missing", "no such file or directory"),
        ("empty folder", "no trace files"),
        ("not json", "not JSON"),
        ("truncated json", "truncated JSON"),
        ("corrupt gzip", "corrupt gzip"),
        ("not a trace", "not a profiler trace"),
        ("empty file", "empty file"),
        ("two runs claim one rank", "different runs"),
        ("unranked traces", "name each file after its rank"),
        ("rank beyond world size", "out of range"),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(tmp_path, kind, needle):
    target = make_bad(tmp_path, kind)
    before = digest(target) if target.is_dir() else {}
    # a folder and, where there is a single file, the file itself
    targets = (
        [target] + [f for f in target.glob("*")] if target.is_dir() and len(list(target.glob("*"))) == 1 else [target]
    )
    for t in targets:
        assert_one_line_error(run_cli("analyze", t), needle)
    if target.is_dir():
        assert digest(target) == before


OOM_LOG = (
    "[rank0]: Traceback (most recent call last):\n"
    '[rank0]:   File "/job/train.py", line 30, in <module>\n'
    "[rank0]:     loss = model(x).sum()\n"
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 79.15 GiB of which 1.20 GiB is free.\n"
)


@pytest.mark.parametrize("rank0_name", ["rank0.pt.trace.json.gz.tmp.json", "rank0.pt.trace.json"])
def test_a_truncated_trace_never_costs_a_failed_runs_card(tmp_path, rank0_name):
    """Issue 41: a rank that died while exporting its trace left it truncated; the run's logs still give the
    failure card (exit 3), and the card says what the unreadable files cost."""
    (tmp_path / "output.log").write_text(OOM_LOG)
    for rank, name in ((0, rank0_name), (1, "rank1.pt.trace.json")):
        good = json.dumps(gpu_step_trace(rank=rank, world_size=2).to_dict()).encode()
        (tmp_path / name).write_bytes(good[: len(good) // 2])
    before = digest(tmp_path)
    res = run_cli("analyze", tmp_path, "--hta", "off")
    assert res.returncode == 3, (res.returncode, res.stdout, res.stderr)
    assert res.stdout.startswith("Verdict: the run failed: A rank ran out of GPU memory"), res.stdout
    flat = " ".join(res.stdout.split())
    assert "rank1.pt.trace.json: invalid or truncated JSON" in flat or "(and 1 more)" in flat
    assert "invalid or truncated JSON" in flat and "performance not assessed" in flat
    if rank0_name.endswith(".tmp.json"):
        assert "rank 0's trace was being written when its process stopped" in flat
    assert "ddpdoctor: error" not in res.stderr and digest(tmp_path) == before


def test_one_truncated_rank_is_a_warning_with_its_cost(tmp_path):
    gpu_step_trace(rank=1, world_size=2).write(tmp_path / "rank1.json")
    good = json.dumps(gpu_step_trace(rank=0, world_size=2).to_dict()).encode()
    (tmp_path / "rank0.json").write_bytes(good[: len(good) // 2])
    res = run_cli("analyze", tmp_path, "--hta", "off")
    assert res.returncode == 0, res.stderr
    flat = " ".join(res.stdout.split())
    assert "rank0.json: invalid or truncated JSON" in flat
    assert "rank 0 is left out of the step breakdown and of the comparison between ranks" in flat


def test_missing_ranks_warn_and_give_partial_results(tmp_path):
    for r in range(6):
        gpu_step_trace(rank=r, world_size=8).write(tmp_path / f"rank{r}.json")
    out = tmp_path / "a.json"
    res = run_cli("analyze", tmp_path, "--json", out)
    assert res.returncode == 0, res.stderr
    assert "world_size is 8 but traces cover 6 ranks; missing: 6-7" in res.stdout
    data = json.loads(out.read_text())
    assert data["partial"] is True and data["analysis"]["ranks_present"] == list(range(6))


def test_ranks_analyzes_the_chosen_ranks_only_and_every_output_says_so(tmp_path):
    from ddpdoctor_synth import Scenario, generate

    traces = tmp_path / "traces"
    generate(Scenario(world_size=12, steps=3, straggler_rank=9, straggler_extra_us=15000.0), traces)
    out, report = tmp_path / "a.json", tmp_path / "report"
    res = run_cli(
        "analyze", traces, "--ranks", "0-3,9,40", "--hta", "off", "--no-config", "--json", out, "--report", report
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(out.read_text())
    assert data["analysis"]["ranks_present"] == [0, 1, 2, 3, 9] and data["partial"] is True
    assert [s["rank"] for s in data["analysis"]["cross_rank"]["stragglers"]] == [9]
    notice = "analyzed 5 of 12 ranks on purpose (--ranks 0-3,9,40)"
    flat = " ".join(res.stdout.split())  # the terminal wraps at 80 columns
    assert notice in flat and "no trace for rank 40" in flat
    assert "chosen with --ranks 0-3,9,40: drop --ranks to compare every rank" in data["verdict"]["confidence_hints"][0]
    assert "record every rank" not in flat  # the missing ranks were not lost: they were left out
    for name in ("report.md", "report.html", "report.json"):
        assert notice in " ".join((report / name).read_text().split()), name
    # without --ranks the same folder is whole
    whole = run_cli("analyze", traces, "--hta", "off", "--no-config", "--json", out, "--force")
    assert whole.returncode == 0 and json.loads(out.read_text())["partial"] is False


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("0-x", "0-x is not a rank or a range"),
        ("7-3", "runs backwards"),
        ("", "an empty item is not a rank"),
        ("50-60", "no trace for any of those ranks (the traces hold ranks 0-1)"),
    ],
)
def test_a_bad_ranks_spec_is_one_line_and_exit_2(tmp_path, spec, needle):
    gpu_step_trace(rank=0, world_size=2).write(tmp_path / "rank0.json")
    gpu_step_trace(rank=1, world_size=2).write(tmp_path / "rank1.json")
    assert_one_line_error(run_cli("analyze", tmp_path, "--ranks", spec), needle)


def test_a_bad_file_inside_a_folder_is_skipped_with_a_warning(tmp_path):
    gpu_step_trace(rank=0, world_size=2).write(tmp_path / "rank0.json")
    gpu_step_trace(rank=1, world_size=2).write(tmp_path / "rank1.json")
    (tmp_path / "notes.json").write_text('{"not": "a trace"}')
    res = run_cli("analyze", tmp_path)
    # another JSON beside the traces is named, as a note: the job's traces are whole
    assert res.returncode == 0 and "ignored notes.json" in res.stdout and "note:" in res.stdout
    assert "partial" not in res.stdout
    (tmp_path / "rank2.json").write_text("{ not json")  # a trace-named file that cannot be read
    res = run_cli("analyze", tmp_path)
    assert res.returncode == 0 and "skipped" in res.stdout and "rank2.json" in res.stdout


def test_help_on_every_command():
    for args in (["--help"], ["analyze", "--help"]):
        res = run_cli(*args)
        assert res.returncode == 0 and "Usage" in res.stdout
    assert "ddpdoctor" in run_cli("--version").stdout
