"""The README's two commands must stay true."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
    """The example under "The diagnosis" is real output: its lines up to the elided fix are the card's."""
    text = (ROOT / "README.md").read_text()
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
    text = (ROOT / "README.md").read_text()
    block = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return [ln.split()[0] for ln in block.splitlines() if ln.startswith("    ") and ln.strip()]


def test_readme_layout_lists_what_the_tree_holds():
    """The layout block names every package and top-level module of ddpdoctor/, and nothing that is gone."""
    listed = _layout_block()
    for path in listed:
        assert (ROOT / path).exists(), f"README layout lists {path}, which does not exist"
    pkg = ROOT / "ddpdoctor"
    expected = {f"ddpdoctor/{p.name}/" for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    expected |= {f"ddpdoctor/{p.name}" for p in pkg.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    expected |= {f"{p.name}/" for p in ROOT.iterdir() if p.is_dir() and p != pkg and _is_source_folder(p)}
    missing = sorted(expected - set(listed))
    assert not missing, f"README layout does not list {missing}"


def _is_source_folder(p: Path) -> bool:
    """A top-level folder of the repository (not a hidden one, a virtualenv, a build or a cache)."""
    if p.name.startswith((".", "__")) or p.name in ("build", "dist") or p.name.endswith(".egg-info"):
        return False
    return not (p / "pyvenv.cfg").exists() and not p.name.startswith("ddpdoctor-out")


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
