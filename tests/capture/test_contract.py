"""settings.json and events.jsonl: the agent (writer) and the analysis (reader) against
capture/agent/contract.py.  A field written but not declared, declared but never written, or read but
not declared fails here; so does an event kind the agent writes that the contract does not name."""

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest

from ddpdoctor.bundle import events as bundle_events
from ddpdoctor.bundle import settings as bundle_settings
from ddpdoctor.capture.agent import contract
from ddpdoctor.capture.agent import core as agent
from ddpdoctor.fact_catalogue import default_catalogue

ROOT = Path(__file__).resolve().parents[2]
AGENT_DIR = ROOT / "ddpdoctor" / "capture" / "agent"
CONTRACT_PLACE = "settings.json fields missing from contract.py"


@pytest.fixture
def rank(tmp_path):
    a = agent.Agent({"DDPDOCTOR_BUNDLE": str(tmp_path), "RANK": "0", "WORLD_SIZE": "1"})
    (tmp_path / "ranks" / "rank0").mkdir(parents=True)
    a.log.open(str(tmp_path / "ranks" / "rank0" / "events.jsonl"))
    return a


def _with_a_loader_and_an_optimizer(rank):
    torch = pytest.importorskip("torch")
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(8, 2)), batch_size=4)
    rank.settings.loader_iter(None, iter(loader), loader)
    model = torch.nn.Linear(2, 1)
    rank.settings.optimizer_seen(torch.optim.SGD(model.parameters(), lr=0.1))
    rank.torch = torch
    return rank


# ---------------------------------------------------------------------------- the writer


def test_the_recorder_writes_every_declared_field_and_no_other(rank):
    d = _with_a_loader_and_an_optimizer(rank).settings.collect()
    assert d["schema"] == contract.SETTINGS_SCHEMA
    assert contract.undeclared_settings(d) == []
    assert set(contract.SETTINGS_FIELDS) - set(d) == set(contract.OPTIONAL_SETTINGS_FIELDS)
    assert not [e for e in d["agent_errors"] if e["place"] == CONTRACT_PLACE]


def test_the_optional_fields_are_written_when_they_apply(rank):
    rank.trial = {"changes": {"dataloader.num_workers": 2}, "skipped": {}, "applied": {}}
    d = rank.settings.collect(lite=True)  # the signal watcher's copy adds settings_note
    assert {"trial", "settings_note"} <= set(d) and contract.undeclared_settings(d) == []


def test_a_field_the_contract_does_not_declare_is_told_once_as_a_capture_error(rank, monkeypatch):
    monkeypatch.setitem(contract.SETTINGS_RECORDS, "exit", ("code",))
    monkeypatch.delitem(contract.SETTINGS_FIELDS, "ooms")
    rank.settings.write(lite=True)
    rank.settings.write(lite=True)
    written = json.loads(Path(rank.dir, "settings.json").read_text())
    told = [e for e in written["agent_errors"] if e["place"] == CONTRACT_PLACE]
    assert len(told) == 1 and told[0]["count"] == 1 and told[0]["first_message"] == "ooms, exit.reason"
    assert written["ooms"] == 0  # written all the same: the contract reports, it never drops


def test_the_samples_recorded_by_real_runs_hold_only_declared_fields():
    files = sorted((ROOT / "sample_traces").glob("capture_*/ranks/rank*/settings.json"))
    if not files:
        pytest.skip("no recorded capture sample in sample_traces/ (the bundled samples are absent)")
    for p in files:
        assert contract.undeclared_settings(json.loads(p.read_text())) == [], p


# ---------------------------------------------------------------------------- the reader


def test_every_field_the_reader_reads_is_declared():
    assert bundle_settings.SETTINGS_SCHEMA == contract.SETTINGS_SCHEMA
    for fact, path in bundle_settings._RANK_FACTS.items():
        assert path[0] in contract.SETTINGS_FIELDS, fact
        if len(path) > 1:
            assert path[1] in contract.SETTINGS_RECORDS[path[0]], fact
    # the reads written out in the reader's code: d = one rank's settings.json, dl = its dataloader, mem = memory
    src = Path(bundle_settings.__file__).read_text()
    for var, keys in (
        ("d", contract.SETTINGS_FIELDS),
        ("dl", contract.SETTINGS_RECORDS["dataloader"]),
        ("mem", contract.SETTINGS_RECORDS["memory"]),
    ):
        read = set(re.findall(rf"\b{var}(?:\.get\(|\[)\"(\w+)\"", src))
        assert read and read <= set(keys), (var, sorted(read - set(keys)))


def test_every_fact_the_reader_derives_from_a_field_is_catalogued():
    """The third place a new hook's value goes: rules/facts.toml (a rule may read only catalogued names)."""
    catalogue = default_catalogue()
    missing = [name for name in bundle_settings._RANK_FACTS if name not in catalogue]
    assert missing == []


def test_a_reader_that_reads_an_undeclared_field_is_caught(monkeypatch):
    monkeypatch.setitem(bundle_settings._RANK_FACTS, "config.ddp.made_up", ("ddp", "made_up"))
    with pytest.raises(AssertionError):
        test_every_field_the_reader_reads_is_declared()


# ---------------------------------------------------------------------------- events.jsonl


def _event_kinds_written() -> set[str]:
    """Every literal kind the agent's modules pass to ``….event("kind", …)``."""
    kinds = set()
    for p in AGENT_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "event"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                kinds.add(node.args[0].value)
    return kinds


def test_event_kinds_written_are_the_declared_ones():
    assert _event_kinds_written() == set(contract.EVENT_KINDS)


def test_the_reader_shows_the_declared_problem_kinds():
    assert set(contract.PROBLEM_KINDS) <= set(contract.EVENT_KINDS)
    assert tuple(bundle_events.PROBLEM_KINDS) == contract.PROBLEM_KINDS


# ---------------------------------------------------------------------------- loadable by path


def test_the_contract_imports_nothing_and_loads_by_path():
    tree = ast.parse((AGENT_DIR / "contract.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    spec = importlib.util.spec_from_file_location("contract_by_path", AGENT_DIR / "contract.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.SETTINGS_FIELDS == contract.SETTINGS_FIELDS
