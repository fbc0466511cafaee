"""The Python API (issue 31 item 2): `import ddpdoctor` is light, `analyze` is the CLI's pipeline
(report.json's exact content), nothing is printed, errors carry the CLI's exit codes."""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import ddpdoctor

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "synthetic_gpu_4ranks_dataloader_bound"
FAILED_RUN_LOGS = ROOT / "tests" / "real_logs" / "exit__tecogan-31-local-rank-arg"


def _without_timing(d):
    """Two analyses of the same input differ only in how long they took."""
    if isinstance(d, dict):
        return {k: _without_timing(v) for k, v in d.items() if k not in ("timing", "seconds")}
    if isinstance(d, list):
        return [_without_timing(x) for x in d]
    return d


@pytest.fixture(scope="module")
def cli_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "rep"
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(SAMPLE), "--report", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return out


def test_the_surface_is_what_all_says():
    for name in (
        "analyze",
        "load",
        "compare",
        "Document",
        "Comparison",
        "InputError",
        "FailedRunError",
        "UnreachableError",
        "DDPDoctorError",
    ):
        assert name in ddpdoctor.__all__ and hasattr(ddpdoctor, name), name
    assert all(hasattr(ddpdoctor, n) for n in ddpdoctor.__all__)


def test_import_is_light():
    code = (
        "import sys, ddpdoctor; heavy = [m for m in ('torch', 'numpy', 'pandas', 'matplotlib', 'click', 'rich', "
        "'msgspec') if m in sys.modules]; print(heavy)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr


def test_analyze_is_report_json_and_prints_nothing(cli_report, capfd):
    doc = ddpdoctor.analyze(SAMPLE)
    md, html, term = doc.render("markdown"), doc.render("html"), doc.render("terminal")
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    cli = json.loads((cli_report / "report.json").read_text())
    assert _without_timing(doc.to_dict()) == _without_timing(cli)
    assert doc.to_json() == json.dumps(doc.to_dict(), indent=1) + "\n"
    # typed views of the same content
    assert doc.verdict.bottleneck == cli["verdict"]["bottleneck"] == "dataloader"
    assert [f.rule for f in doc.findings] == [f["rule"] for f in cli["findings"]]
    assert doc.findings[0].fixes and doc.findings[0].fixes[0].title == cli["findings"][0]["fixes"][0]["title"]
    assert not doc.failed and doc.exit_code == 0
    # the renderers are the CLI's
    assert md.startswith("# ") and "DataLoader" in md and "<html" in html.lower()
    assert term.startswith("Verdict: dataloader-bound") and "Next:" in term
    assert doc.render("json") == doc.to_json()


def test_options_reach_the_pipeline(capfd):
    part = ddpdoctor.analyze([str(SAMPLE)], ranks="0-1", overrides={"DL001.min_wait_share": 0.9}, hta="off")
    d = part.to_dict()
    assert d["partial"] is True and sorted(d["analysis"]["ranks"]) == ["0", "1"]
    assert "DL001" not in [f.rule for f in part.findings]  # its threshold raised above the 30 % wait
    assert capfd.readouterr() == ("", "")
    # the override lasted one call
    assert "DL001" in [f.rule for f in ddpdoctor.analyze(SAMPLE, hta="off").findings]


def test_load_reads_report_json_folder_and_bundle_archive(cli_report, tmp_path, capfd):
    cli = json.loads((cli_report / "report.json").read_text())
    assert ddpdoctor.load(cli_report / "report.json").to_dict() == cli
    assert ddpdoctor.load(str(cli_report)).to_dict() == cli
    archive = tmp_path / "ticket.tar.gz"
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "bundle", str(cli_report), "-o", str(archive), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    capfd.readouterr()
    with tarfile.open(archive) as tf:
        member = next(m for m in tf.getmembers() if m.name.endswith("report.json"))
        inside = json.load(tf.extractfile(member))
    assert ddpdoctor.load(archive).to_dict() == inside
    assert capfd.readouterr() == ("", "")


def test_compare_takes_documents_dicts_and_paths(cli_report, capfd):
    doc = ddpdoctor.load(cli_report)
    c = ddpdoctor.compare(doc, cli_report / "report.json")
    c2 = ddpdoctor.compare(doc.to_dict(), doc, max_regression=-1.0)
    assert capfd.readouterr() == ("", "")
    assert c.speedup == pytest.approx(1.0) and not c.regressed and not c.verdict_moved
    assert c2.regressed is True  # +0.0 % is above a limit of -1 %: the CLI would exit 1
    assert c.to_dict()["schema"] == "ddpdoctor.compare/1" and "step time" in c.render("text")
    assert "|" in c.render("markdown") and json.loads(c.render("json"))["speedup"] == c.speedup


def test_errors_are_exceptions_with_the_cli_exit_codes(tmp_path, capfd):
    with pytest.raises(ddpdoctor.InputError) as e:
        ddpdoctor.analyze(tmp_path / "nothing-here")
    assert e.value.exit_code == 2 and "no such file" in str(e.value)
    bad = tmp_path / "report.json"
    bad.write_text('{"schema": "ddpdoctor.diagnosis/1", "verdict": {"summary": 3}}')
    with pytest.raises(ddpdoctor.InputError) as e:
        ddpdoctor.load(bad)
    assert e.value.exit_code == 2 and "malformed" in str(e.value)
    junk = tmp_path / "x.tar.gz"
    junk.write_bytes(b"not an archive")
    with pytest.raises(ddpdoctor.InputError):
        ddpdoctor.load(junk)
    with pytest.raises(ddpdoctor.InputError):
        ddpdoctor.analyze(SAMPLE, comm_kernels=["("])
    with pytest.raises(ddpdoctor.InputError):
        ddpdoctor.analyze([])
    with pytest.raises(ddpdoctor.InputError):
        ddpdoctor.load(ROOT / "sample_traces")  # a folder of traces: load never analyzes
    with pytest.raises(ddpdoctor.InputError):
        ddpdoctor.analyze(SAMPLE).render("pdf")
    assert capfd.readouterr() == ("", "")


@pytest.mark.skipif(
    not FAILED_RUN_LOGS.is_dir(), reason="tests/real_logs case exit__tecogan-31 is not in this checkout"
)
def test_a_failed_run_is_a_document_or_with_check_failed_run_error(capfd):
    doc = ddpdoctor.analyze(FAILED_RUN_LOGS)
    assert doc.failed and doc.exit_code == 3
    with pytest.raises(ddpdoctor.FailedRunError) as e:
        ddpdoctor.analyze(FAILED_RUN_LOGS, check=True)
    assert e.value.exit_code == 3 and e.value.document.failed and str(e.value) == doc.verdict.summary
    assert capfd.readouterr() == ("", "")
    res = subprocess.run([sys.executable, "-m", "ddpdoctor", "analyze", str(FAILED_RUN_LOGS), "-q"], timeout=120)
    assert res.returncode == doc.exit_code


def readme_api_example() -> str:
    """The Python API example (moved from the README to docs/REFERENCE.md, issue 41)."""
    text = (ROOT / "docs" / "REFERENCE.md").read_text()
    section = text.split("## Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_api_example_runs():
    code = readme_api_example()
    assert "ddpdoctor.analyze(" in code and "ddpdoctor.load(" in code and "ddpdoctor.compare(" in code
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert res.returncode == 0, res.stderr
    shown = re.findall(r"^# prints: (.*)$", code, re.M)
    assert shown, "the example says what it prints"
    for line in shown:
        assert line in res.stdout, (line, res.stdout)
