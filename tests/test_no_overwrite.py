"""No silent overwrite (issue 41, item 3): every option that writes a path refuses to replace a file the user
already has unless --force is given: one line, exit 2, the file untouched, nothing analyzed or run first."""

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracebuilder import gpu_step_trace

from ddpdoctor.cli import main

PRECIOUS = "precious text, not to be lost\n"


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("run")
    for r in (0, 1):
        gpu_step_trace(rank=r, world_size=2).write(run / f"rank{r}.json")
    return run


@pytest.fixture(scope="module")
def report_json(run_folder, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rep") / "report.json"
    res = CliRunner().invoke(main, ["analyze", str(run_folder), "--hta", "off", "--json", str(out), "-q"])
    assert res.exit_code == 0, res.output
    return out


def _job(marker: Path) -> list[str]:
    """A job that leaves a trace of having run, so a refusal is seen to come before it."""
    return ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"]


# (name, the command's arguments for an existing output path P, the input I, a marker M; the message's start)
CASES = [
    ("bundle -o", lambda p, i, j, m: ["bundle", str(i), "-o", str(p), "-q"], "-o"),
    ("bundle --output", lambda p, i, j, m: ["bundle", str(i), "--output", str(p), "-q"], "-o"),
    ("analyze --json", lambda p, i, j, m: ["analyze", str(i), "--hta", "off", "--json", str(p), "-q"], "--json"),
    ("report -o", lambda p, i, j, m: ["report", str(j), "--format", "md", "-o", str(p)], "-o"),
    ("report -o terminal", lambda p, i, j, m: ["report", str(j), "--format", "terminal", "-o", str(p)], "-o"),
    ("run --json", lambda p, i, j, m: ["run", "--out", str(m.parent / "b"), "--json", str(p), *_job(m)], "--json"),
    (
        "run --report (a file)",
        lambda p, i, j, m: ["run", "--out", str(m.parent / "b"), "--report", str(p), *_job(m)],
        "--report",
    ),
    ("analyze --report (a file)", lambda p, i, j, m: ["analyze", str(i), "--report", str(p)], "--report"),
    ("run --out (a file)", lambda p, i, j, m: ["run", "--out", str(p), *_job(m)], str(Path("x").name)),
    ("run --try --out (a file)", lambda p, i, j, m: ["run", "--try", "env.X=1", "--out", str(p), *_job(m)], ""),
    ("tune --out (a file)", lambda p, i, j, m: ["tune", "--out", str(p), *_job(m)], ""),
    ("tune --json", lambda p, i, j, m: ["tune", "--out", str(m.parent / "b"), "--json", str(p), *_job(m)], "--json"),
    (
        "tune --report (a file)",
        lambda p, i, j, m: ["tune", "--out", str(m.parent / "b"), "--report", str(p), *_job(m)],
        "--report",
    ),
]


@pytest.mark.parametrize("name,args,option", CASES, ids=[c[0] for c in CASES])
def test_existing_file_is_refused(name, args, option, run_folder, report_json, tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text(PRECIOUS)
    marker = tmp_path / "job-ran"
    res = CliRunner().invoke(main, args(precious, run_folder, report_json, marker))
    assert res.exit_code == 2, (res.exit_code, res.output)
    err = res.output.strip()
    if err.startswith("Usage:"):  # click's own refusal of a file given for a folder option: its last line
        err = err.splitlines()[-1]
        assert err.startswith("Error: Invalid value for") and "is a file" in err, err
    else:
        assert len(err.splitlines()) == 1 and err.startswith("ddpdoctor: error: "), err
    assert str(precious) in err and "Traceback" not in res.output, err
    assert option in err, err
    assert precious.read_text() == PRECIOUS  # untouched
    assert not marker.exists()  # refused before the job ran
    assert not (tmp_path / "b").exists()


FORCED = [c for c in CASES if c[0] in ("bundle -o", "analyze --json", "report -o")]


@pytest.mark.parametrize("name,args,option", FORCED, ids=[c[0] for c in FORCED])
def test_force_replaces_the_file(name, args, option, run_folder, report_json, tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text(PRECIOUS)
    res = CliRunner().invoke(main, [*args(precious, run_folder, report_json, tmp_path / "m"), "--force"])
    assert res.exit_code == 0, res.output
    assert precious.read_bytes() != PRECIOUS.encode()


@pytest.mark.parametrize("name,args,option", FORCED, ids=[c[0] for c in FORCED])
def test_a_folder_is_not_a_file_to_write(name, args, option, run_folder, report_json, tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    (folder / "keep.txt").write_text(PRECIOUS)
    res = CliRunner().invoke(main, [*args(folder, run_folder, report_json, tmp_path / "m"), "--force"])
    assert res.exit_code == 2, res.output
    assert "is a folder" in res.output or "is a directory" in res.output, res.output
    assert (folder / "keep.txt").read_text() == PRECIOUS


def test_a_new_file_is_written_without_force(run_folder, tmp_path):
    out = tmp_path / "new" / "t.tar.gz"
    res = CliRunner().invoke(main, ["bundle", str(run_folder), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size > 0


def test_every_writing_option_is_in_the_table():
    """A new command option that writes a path must join CASES (the table above)."""
    import click

    writers = set()

    def walk(cmd, prefix):
        if isinstance(cmd, click.Group):
            for sub in cmd.commands.values():
                walk(sub, f"{prefix} {sub.name}".strip())
            return
        for p in cmd.params:
            if isinstance(p, click.Option) and ({"-o", "--output", "--json", "--report", "--out"} & set(p.opts)):
                writers.add(f"{prefix} {max(p.opts, key=len)}")

    walk(main, "")
    tabled = {c[0].split(" (")[0].replace(" -o", " --output") for c in CASES}
    assert writers <= tabled, writers - tabled
