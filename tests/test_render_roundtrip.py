"""Renderers read the document only (issue 40 item 2): every registered renderer, given a sample's diagnosis
and given the same diagnosis written to report.json and read back, writes the same bytes.  A renderer that
reads anything besides the document (rules, thresholds, a prediction model, a key report.json does not
keep) would differ here.  One sample in the fast tier; every sample under `slow`."""

from __future__ import annotations

from pathlib import Path

import pytest

import ddpdoctor
from ddpdoctor.report.files import dumps_json, load_diagnosis, prepare
from ddpdoctor.report.renderers import RENDERERS, RenderOptions

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted(p for p in (ROOT / "sample_traces").iterdir() if p.is_dir())
FAST_SAMPLE = "synthetic_gpu_4ranks_dataloader_bound"  # a verdict, findings with fixes, predictions
OPTIONS = (RenderOptions(), RenderOptions(verbose=True, width=100), RenderOptions(report_dir="out"))


def _outputs(d: dict) -> dict[tuple[str, RenderOptions], str]:
    return {(name, o): r.render(d, o) for name, r in RENDERERS.items() for o in OPTIONS}


def _check_roundtrip(doc: ddpdoctor.Document, sample: Path, tmp_path: Path) -> None:
    first = _outputs(doc._data)
    (tmp_path / "report.json").write_text(dumps_json(doc._data), encoding="utf-8")
    again = prepare(load_diagnosis(str(tmp_path)))  # as `ddpdoctor report` reads it back
    second = _outputs(again)
    for key, text in first.items():
        assert text, key
        assert second[key] == text, f"{sample.name}: {key[0]} {key[1]} differs after a round trip through report.json"


def test_samples_found():
    assert FAST_SAMPLE in [p.name for p in SAMPLES] and len(SAMPLES) >= 8


def test_one_table_of_renderers():
    assert set(RENDERERS) == {"terminal", "md", "html", "json"}
    for name, r in RENDERERS.items():
        assert r.name == name and r.describe


def test_roundtrip_fast_sample(tmp_path, sample_document):
    _check_roundtrip(sample_document(FAST_SAMPLE), ROOT / "sample_traces" / FAST_SAMPLE, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("sample", [p for p in SAMPLES if p.name != FAST_SAMPLE], ids=lambda p: p.name)
def test_roundtrip_every_sample(sample, tmp_path, sample_document):
    _check_roundtrip(sample_document(sample.name), sample, tmp_path)
