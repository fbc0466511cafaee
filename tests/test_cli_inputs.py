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
    return subprocess.run([sys.executable, "-m", "ddpdoctor", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


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


@pytest.mark.parametrize("kind,needle", [
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
])
def test_bad_input_gives_one_line_and_exit_2(tmp_path, kind, needle):
    target = make_bad(tmp_path, kind)
    before = digest(target) if target.is_dir() else {}
    # a folder and, where there is a single file, the file itself
    targets = [target] + [f for f in target.glob("*")] if target.is_dir() and len(list(target.glob("*"))) == 1 else [target]
    for t in targets:
        assert_one_line_error(run_cli("analyze", t), needle)
    if target.is_dir():
        assert digest(target) == before


def test_missing_ranks_warn_and_give_partial_results(tmp_path):
    for r in range(6):
        gpu_step_trace(rank=r, world_size=8).write(tmp_path / f"rank{r}.json")
    out = tmp_path / "a.json"
    res = run_cli("analyze", tmp_path, "--json", out)
    assert res.returncode == 0, res.stderr
    assert "world_size is 8 but traces cover 6 rank(s); missing: 6-7" in res.stdout
    data = json.loads(out.read_text())
    assert data["partial"] is True and data["analysis"]["ranks_present"] == list(range(6))


def test_a_bad_file_inside_a_folder_is_skipped_with_a_warning(tmp_path):
    gpu_step_trace(rank=0, world_size=2).write(tmp_path / "rank0.json")
    gpu_step_trace(rank=1, world_size=2).write(tmp_path / "rank1.json")
    (tmp_path / "notes.json").write_text('{"not": "a trace"}')
    res = run_cli("analyze", tmp_path)
    assert res.returncode == 0 and "skipped" in res.stdout and "notes.json" in res.stdout


def test_help_on_every_command():
    for args in (["--help"], ["analyze", "--help"]):
        res = run_cli(*args)
        assert res.returncode == 0 and "Usage" in res.stdout
    assert "ddpdoctor" in run_cli("--version").stdout
