"""A light default install (#14 item 7): HTA's cross-check is the extra ddpdoctor[hta], the default
dependencies carry no notebook stack, and `--hta on` without HTA says how to install it."""

import os
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpdoctor.cli import main
from ddpdoctor.metrics import hta_adapter

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("traceinsight", "jupyter", "jupyterlab", "ipykernel", "notebook", "ipython", "ipywidgets", "plotly")


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_default_dependencies_carry_no_notebook_stack():
    names = [
        d.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
        for d in _project()["dependencies"]
    ]
    assert not [n for n in names if n in HEAVY], names
    extras = _project()["optional-dependencies"]
    assert any(d.startswith("traceinsight") for d in extras["hta"])
    assert any("hta" in d for d in extras["test"] if d.startswith("ddpdoctor[")), "the tests install the extra"


def test_hta_on_without_hta_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(hta_adapter, "available", lambda: False)
    sample = ROOT / "sample_traces" / "synthetic_gpu_4ranks_dataloader_bound"
    res = CliRunner().invoke(main, ["analyze", str(sample), "--hta", "on"])
    assert res.exit_code == 2 and "pip install 'ddpdoctor[hta]'" in res.output, res.output
    # compare shows no HTA numbers and never runs it: --hta is accepted there for old scripts and ignored
    res = CliRunner().invoke(main, ["compare", str(sample), str(sample), "--hta", "on"])
    assert res.exit_code == 0 and "pip install" not in res.output, res.output
    res = CliRunner().invoke(main, ["analyze", str(sample), "--format", "json"])  # auto: skipped quietly
    assert res.exit_code == 0 and '"hta": null' in res.output


def _compiler() -> str | None:
    cc = shlex.split(os.environ.get("CC", "cc"))
    return shutil.which(cc[0]) if cc else None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel .` builds from this checkout (hatch_build.py runs)."""
    out = tmp_path_factory.mktemp("wheel")
    before = _untracked_in_package()
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert _untracked_in_package() == before, "the build wrote into the checkout"
    (whl,) = out.glob("ddpdoctor-*.whl")
    return whl


def _untracked_in_package() -> set[str]:
    return {str(p.relative_to(ROOT)) for p in (ROOT / "ddpdoctor").rglob("*.so")}


def test_the_wheel_is_tagged_for_any_python_of_its_platform(wheel):
    tag = wheel.name.removesuffix(".whl").split("-")[-3:]
    names = zipfile.ZipFile(wheel).namelist()
    if "ddpdoctor/trace/_kscan.so" in names:  # a ctypes library: no CPython ABI
        assert tag[:2] == ["py3", "none"] and tag[2] != "any", wheel.name
    else:
        assert _compiler() is None, f"a C compiler exists but the wheel has no C reader: {wheel.name}"
        assert tag == ["py3", "none", "any"], wheel.name


def test_the_wheel_carries_no_test_helpers(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("ddpdoctor/synth/")]
    assert "ddpdoctor/_rules/dataloader/DL001-dataloader-wait.toml" in names
