"""`--report DIR` (#27 part 5): a folder that holds other files is refused without --force (one line,
exit 2, before any analysis); an earlier report is replaced whole, so no plot of an earlier run stays."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.errors import InputError
from ddpdoctor.report.files import check_report_dir, is_report_dir, write_report_dir

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "synthetic_gpu_4ranks_dataloader_bound"


def _analyze(*args):
    return subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(SAMPLE), "-q", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_folder_with_other_files_is_refused_in_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    res = _analyze("--report", tmp_path)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "not empty" in lines[0] and "--force" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    res = _analyze("--report", tmp_path, "--force")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine" and is_report_dir(tmp_path)


def test_an_earlier_report_is_replaced_whole(tmp_path):
    out = tmp_path / "rep"
    assert _analyze("--report", out).returncode == 0
    stale = out / "plots" / "from_an_earlier_run.png"
    stale.write_bytes(b"\x89PNG old")
    before = json.loads((out / "report.json").read_text())
    res = _analyze("--report", out)  # no --force needed: it is an earlier report
    assert res.returncode == 0, res.stderr
    assert not stale.exists()
    assert json.loads((out / "report.json").read_text())["verdict"] == before["verdict"]
    assert {p.name for p in out.iterdir()} == {"report.md", "report.html", "report.json", "plots"}


def test_check_report_dir_units(tmp_path):
    check_report_dir(tmp_path / "new")  # not there yet: fine
    check_report_dir(tmp_path)  # empty: fine
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        check_report_dir(f)
    with pytest.raises(InputError, match="not empty"):
        check_report_dir(tmp_path)
    (tmp_path / "report.json").write_text('{"schema": "something else"}')
    with pytest.raises(InputError, match="not empty"):
        write_report_dir({}, tmp_path)


@pytest.mark.live
def test_run_refuses_the_report_folder_before_the_job_runs(tmp_path):
    """`run --report DIR` checks DIR before starting the job: a refused folder costs no run."""
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "notes.txt").write_text("mine")
    marker = tmp_path / "ran"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--out",
            str(tmp_path / "b"),
            "--report",
            str(tmp_path / "rep"),
            "--",
            sys.executable,
            "-c",
            f"open({str(marker)!r}, 'w')",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "not empty" in res.stderr and "--force" in res.stderr, res.stderr
    assert not marker.exists() and not (tmp_path / "b").exists()
