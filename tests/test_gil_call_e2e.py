"""A GIL-holding C call end to end: `ddpdoctor run` on a real 2-rank torchrun job (CPU, gloo) in which rank 0
calls pickle.dumps on a large dict every step (tests/scripts/gil_call_rank0.py).  With the native sampler off
(the default), the sampler's gaps on rank 0 must end as pickle.dumps returns and name it with the line that
called it, and the diagnosis must carry that name."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import project_env

from ddpdoctor.capture.agent.gil_places import RETURNED

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).parent / "scripts" / "gil_call_rank0.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
CALL_LINE = next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1) if "return pickle.dumps" in line)
WHERE = f"pickle.dumps in snapshot (gil_call_rank0.py:{CALL_LINE})"


@pytest.fixture(scope="module")
def gil_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gil") / "bundle"
    out.mkdir()
    env = project_env()
    env.pop("DDPDOCTOR_NATIVE_SAMPLER", None)
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--out", str(out), "--json", str(out / "d.json")]
    cmd += ["--warmup", "4", "--active", "6", "--", *TORCHRUN, str(SCRIPT), "14"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return out, json.loads((out / "d.json").read_text())


def test_the_gaps_on_rank0_are_named_by_the_call_they_ended_on(gil_run):
    out, _d = gil_run
    ev = {r: json.loads((out / "ranks" / f"rank{r}" / "settings.json").read_text())["evidence"] for r in (0, 1)}
    g0 = ev[0]["gil"]
    assert g0["native"]["sampler"] is None
    named = [gap for gap in g0["listed"] if gap["cause"] == "call"]
    assert named and g0["calls"][0]["where"] == WHERE, g0["listed"]
    assert g0["calls"][0]["source"] == RETURNED and g0["calls"][0]["gaps"] >= 2, g0["calls"]
    assert all(c["where"] != WHERE for c in ev[1]["gil"]["calls"])


def test_the_diagnosis_names_pickle_dumps_and_its_line(gil_run):
    _out, d = gil_run
    facts = d["facts"]
    assert facts["python.gil_held.rank"] == 0 and facts["python.gil_held.where"] == WHERE, facts
    top = next(f for f in d["findings"] if f["rule"] == d["verdict"]["rule"])
    assert d["verdict"]["bottleneck"] == "imbalance", d["verdict"]["summary"]
    assert WHERE in top["fixes"][0]["title"], top["fixes"][0]["title"]
