"""The README's two commands must stay true."""

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
    res = subprocess.run([sys.executable, "-m", "ddpdoctor", "analyze", target], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Verdict: imbalance-bound") and "Rank 1 is a straggler" in res.stdout
    assert "Straggler: rank 1" in res.stdout
