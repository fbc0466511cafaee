"""The diagnosis document (#13 part 5): typed, its JSON Schema exported and current, every
document analyze writes conforms, and a malformed report.json is refused naming the field."""

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from ddpdoctor.errors import InputError
from ddpdoctor.report.document import json_schema, validate

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILE = ROOT / "docs" / "diagnosis.schema.json"
SAMPLES = sorted(p for p in (ROOT / "sample_traces").iterdir() if p.is_dir())


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "ddpdoctor", *map(str, args)], capture_output=True, text=True, timeout=180, cwd=ROOT
    )


def test_the_exported_schema_is_current():
    # regenerate with: ddpdoctor schema > docs/diagnosis.schema.json
    assert json.loads(SCHEMA_FILE.read_text()) == json.loads(json.dumps(json_schema()))
    assert json.loads(_cli("schema").stdout) == json.loads(SCHEMA_FILE.read_text())


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_every_sample_diagnosis_conforms(sample, sample_document):
    d = sample_document(sample.name).to_dict()  # what `ddpdoctor analyze SAMPLE --format json --hta off` prints
    validate(d)
    jsonschema.validate(d, json.loads(SCHEMA_FILE.read_text()))


def test_a_wrong_type_is_refused_with_its_path(tmp_path, sample_document):
    d = sample_document(SAMPLES[0].name).to_dict()
    d["findings"][0]["fixes"][0]["title"] = 5
    with pytest.raises(InputError, match=r"\$\.findings\[0\]\.fixes\[0\]\.title"):
        validate(d, "x.json")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(d, json_schema())
    (tmp_path / "report.json").write_text(json.dumps(d))
    res = _cli("report", tmp_path / "report.json", "--format", "terminal")
    assert res.returncode == 2 and "findings[0].fixes[0].title" in res.stderr and "Traceback" not in res.stderr
    d["findings"][0]["fixes"][0]["title"] = "back to text"
    del d["verdict"]
    with pytest.raises(InputError, match="verdict"):
        validate(d)
