"""A light default install (#14 item 7): HTA's cross-check is the extra ddpdoctor[hta], the default
dependencies carry no notebook stack, and `--hta on` without HTA says how to install it."""

import tomllib
from pathlib import Path

from click.testing import CliRunner

from ddpdoctor.cli import main
from ddpdoctor.metrics import hta_adapter

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("traceinsight", "jupyter", "jupyterlab", "ipykernel", "notebook", "ipython", "ipywidgets", "plotly")


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_default_dependencies_carry_no_notebook_stack():
    names = [d.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
             for d in _project()["dependencies"]]
    assert not [n for n in names if n in HEAVY], names
    extras = _project()["optional-dependencies"]
    assert any(d.startswith("traceinsight") for d in extras["hta"])
    assert any("hta" in d for d in extras["test"] if d.startswith("ddpdoctor[")), "the tests install the extra"


def test_hta_on_without_hta_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(hta_adapter, "available", lambda: False)
    sample = ROOT / "sample_traces" / "synthetic_gpu_4ranks_dataloader_bound"
    for args in (["analyze", str(sample), "--hta", "on"], ["compare", str(sample), str(sample), "--hta", "on"]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2 and "pip install 'ddpdoctor[hta]'" in res.output, res.output
    res = CliRunner().invoke(main, ["analyze", str(sample), "--format", "json"])       # auto: skipped quietly
    assert res.exit_code == 0 and '"hta": null' in res.output
