"""The README's two commands must stay true, every other command in it runs as shown, it stays short
(issue 41), and the examples that moved to docs/REFERENCE.md stay real output."""

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "REFERENCE.md"
MAX_README_LINES = 300


def readme_commands():
    text = (ROOT / "README.md").read_text()
    return [line.strip() for line in text.splitlines() if line.startswith("    python -m pip install torch==")]


def test_readme_has_the_two_commands_and_ci_runs_the_test_one():
    install_analyze, install_test = readme_commands()[:2]
    assert "ddpdoctor analyze sample_traces/" in install_analyze
    assert install_test.endswith("python -m pytest -q")
    assert install_test in (ROOT / ".ci" / "run").read_text()


def test_readme_quickstart_analysis_runs():
    cmd = readme_commands()[0]
    target = re.search(r"ddpdoctor analyze (\S+)", cmd).group(1)
    env = {**os.environ, "COLUMNS": "80"}
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    # the card (#14): the verdict first, a Next: line, one screen at 80 columns, nothing that contradicts it
    assert res.stdout.startswith("Verdict: imbalance-bound") and "Rank 1 is a straggler" in res.stdout
    assert any(ln.startswith("Next: ddpdoctor ") for ln in lines), res.stdout
    assert len(lines) <= 30 and max(map(len, lines)) <= 80, res.stdout
    assert "Biggest cost" not in res.stdout and "-bound" not in res.stdout.split("Verdict:", 1)[1].split("\n", 1)[1]
    for leak in ("rank(s)", "(not recorded))", "goes to other", "extra_us", "late_rank"):
        assert leak not in res.stdout, leak
    full = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", target, "-v"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert full.returncode == 0 and full.stdout.startswith(res.stdout.split("\nNext:")[0])
    assert "Straggler: rank 1" in full.stdout and "Every finding" in full.stdout


def test_readme_verdict_example_is_what_analyze_prints():
    """The example under "The diagnosis" (docs/REFERENCE.md) is real output: its lines up to the elided fix
    are the card's."""
    text = REFERENCE.read_text()
    block = text.split("    $ ddpdoctor analyze sample_traces/synthetic_gpu_4ranks_dataloader_bound\n", 1)[1]
    shown = [ln[4:] for ln in block.split("      ...\n", 1)[0].splitlines()]
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", "sample_traces/synthetic_gpu_4ranks_dataloader_bound"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert res.returncode == 0 and res.stdout.splitlines()[: len(shown)] == shown, res.stdout


def _layout_block() -> list[str]:
    text = REFERENCE.read_text()
    block = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return [ln.split()[0] for ln in block.splitlines() if ln.startswith("    ") and ln.strip()]


def test_readme_layout_lists_what_the_tree_holds():
    """The layout block (docs/REFERENCE.md) names every package and top-level module of ddpdoctor/, and
    nothing that is gone."""
    listed = _layout_block()
    for path in listed:
        assert (ROOT / path).exists(), f"the layout in docs/REFERENCE.md lists {path}, which does not exist"
    pkg = ROOT / "ddpdoctor"
    expected = {f"ddpdoctor/{p.name}/" for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    expected |= {f"ddpdoctor/{p.name}" for p in pkg.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    expected |= {f"{p.name}/" for p in ROOT.iterdir() if p.is_dir() and p != pkg and _is_source_folder(p)}
    missing = sorted(expected - set(listed))
    assert not missing, f"the layout in docs/REFERENCE.md does not list {missing}"


def _is_source_folder(p: Path) -> bool:
    """A top-level folder of the repository (not a hidden one, a virtualenv, a build or a cache)."""
    if p.name.startswith((".", "__")) or p.name in ("build", "dist") or p.name.endswith(".egg-info"):
        return False
    return not (p / "pyvenv.cfg").exists() and not p.name.startswith(
        ("ddpdoctor-out", "ddpdoctor-trial", "ddpdoctor-tune")
    )


def test_readme_quickstart_card_is_what_analyze_prints():
    """The card shown under Quickstart is the quickstart command's real output at 80 columns (the bundled
    sample is re-recorded with today's capture, so it names slow_rank.py:37, not "with_stack=True")."""
    text = (ROOT / "README.md").read_text()
    quick = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    block = quick.split("It prints this card", 1)[1].split("\n\n", 1)[1]
    shown = []
    for ln in block.splitlines():
        if ln and not ln.startswith("    "):
            break
        shown.append(ln[4:])
    while shown and not shown[-1]:
        shown.pop()
    target = re.search(r"ddpdoctor analyze (\S+)", readme_commands()[0]).group(1)
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert res.returncode == 0 and res.stdout.rstrip("\n").splitlines() == shown, res.stdout
    assert "slow_rank.py:37" in res.stdout and "with_stack=True" not in res.stdout


def test_readme_is_short_and_its_figures_have_a_source():
    """A newcomer's page (issue 41): at most 300 lines, no commit hashes, dates or load averages; the
    reference material is in docs/ and linked."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= MAX_README_LINES, len(text.splitlines())
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a date in the README"
    assert "load average" not in text
    assert not re.search(r"\b(commit|at) [0-9a-f]{7,40}\b", text), "a commit hash in the README"
    order = ["## Quickstart", "## How to read the card", "## Everyday commands", "## Launchers", "## Install and test"]
    assert [text.index(h) for h in order] == sorted(text.index(h) for h in order)
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), link


def _readme_commands() -> list[str]:
    """Every command the README shows: its indented code lines and the commands of its launcher table."""
    text = (ROOT / "README.md").read_text()
    cmds = [ln.strip() for ln in text.splitlines() if re.match(r"    (ddpdoctor|python) ", ln)]
    cmds += re.findall(r"^\| [^|]+ \| `(ddpdoctor run -- [^`]+)`", text, re.M)
    return cmds


def _registered_markers() -> set[str]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {m.split(":")[0].strip() for m in cfg["tool"]["pytest"]["ini_options"].get("markers", [])}


def test_every_readme_command_parses_and_names_files_that_exist():
    """`run` and `tune` lines start real jobs (the live tests run them); here each one is parsed by the
    CLI itself and the script it runs must exist. Pytest lines select only registered markers."""
    from ddpdoctor.cli import main

    cmds = _readme_commands()
    assert any(c.startswith("ddpdoctor run ") for c in cmds) and any(c.startswith("ddpdoctor tune ") for c in cmds)
    for cmd in cmds:
        if " && " in cmd or cmd.startswith("python -m pip"):
            continue  # the install lines: test_readme_has_the_two_commands_and_ci_runs_the_test_one
        args = shlex.split(cmd.split(" > ")[0])
        if args[:3] == ["python", "-m", "pytest"]:
            for expr in (args[i + 1] for i, a in enumerate(args) if a == "-m" and i > 1):
                names = set(re.findall(r"[A-Za-z_]+", expr)) - {"not", "and", "or"}
                assert names <= _registered_markers(), (cmd, names)
            continue
        assert args[0] == "ddpdoctor", cmd
        # parsed as `ddpdoctor …` parses it (under the group's context, so its settings such as -h apply)
        parent = click.Context(main, info_name="ddpdoctor", **main.context_settings)
        sub, rest = main.commands[args[1]], args[2:]
        if isinstance(sub, click.Group):  # `ddpdoctor rules list`: the group's command
            parent = click.Context(sub, info_name=args[1], parent=parent)
            sub, rest = sub.commands[args[2]], args[3:]
        sub.make_context(sub.name, list(rest), parent=parent)  # raises on an unknown option or a bad value
        for word in rest:
            if word.endswith(".py") or word.startswith(("examples/", "sample_traces/", "tests/")):
                assert (ROOT / word).exists(), (cmd, word)


@pytest.mark.parametrize("cmd", [c for c in _readme_commands() if re.match(r"ddpdoctor (analyze|report|rules) ", c)])
def test_every_readme_analysis_command_runs_as_shown(cmd, tmp_path):
    """The commands that need no training run here, from a folder that holds only the samples."""
    (tmp_path / "sample_traces").symlink_to(ROOT / "sample_traces")
    if cmd.startswith("ddpdoctor report "):  # it reads the report folder the first Reports line writes
        subprocess.run(
            [sys.executable, "-m", "ddpdoctor", "analyze", "sample_traces/synthetic_gpu_4ranks_dataloader_bound"]
            + ["--report", "report/", "-q"],
            cwd=tmp_path,
            check=True,
            timeout=120,
        )
    args = shlex.split(cmd.split(" > ")[0])
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", *args[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    failed_run = "oom" in cmd  # a job that died: exit 3, with its card
    assert res.returncode == (3 if failed_run else 0), (cmd, res.stderr[-2000:])
    assert "error:" not in res.stderr, cmd
    written = args[args.index("-o") + 1] if "-o" in args else None
    assert (tmp_path / written).stat().st_size if written else res.stdout.strip(), cmd


def test_the_links_of_the_readme_and_the_reference_resolve():
    """The README links into docs/ and docs/REFERENCE.md back out (the material moved there, issue 41):
    every relative link names a file or folder that exists."""
    for page in (ROOT / "README.md", REFERENCE):
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if not target.startswith(("http://", "https://")):
                assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
