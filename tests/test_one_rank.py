"""One rank's trace gives what one rank can give (issue 41, item 4): its breakdown in the verdict's place when no
rule decides, and what a second rank's trace would add — never a bare "see the abstentions"."""

import json
from pathlib import Path

from subprocesses import run_ddpdoctor

from ddpdoctor.rules_engine.undetermined import undetermined_summary

ROOT = Path(__file__).resolve().parents[1]
SLOW_RANK = ROOT / "sample_traces" / "capture_gloo_2ranks_slow_rank" / "ranks" / "rank1" / "rank1.pt.trace.json.gz"


def test_the_slow_ranks_trace_alone_says_where_its_step_goes_and_what_a_second_rank_adds():
    res = run_ddpdoctor(["analyze", SLOW_RANK, "--hta", "off", "--format", "json"], timeout=300)
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    summary = d["verdict"]["summary"]
    other = d["facts"]["rank.share.other"]["1"]
    assert f"{other * 100:.0f} % of rank 1's step is outside any traced operator" in summary, summary
    assert "a second rank's trace would tell whether the others wait for this one" in summary
    assert "abstentions" not in summary and "(-v: what each rule needed)" in summary


def _facts(shares: dict, ranks=(0,), world=2) -> dict:
    f = {"run.partition": list(shares), "run.ranks": list(ranks), "run.world_size": world}
    f.update({f"rank.share.{c}": {str(r): s for r in ranks} for c, s in shares.items()})
    return f


def test_largest_column_first_and_small_ones_left_out():
    s = undetermined_summary(_facts({"compute": 0.2, "comm_exposed": 0.05, "dataloader_wait": 0.001, "other": 0.749}))
    assert s.startswith("75 % of rank 0's step is outside any traced operator")
    assert "compute 20 %, exposed communication 5 %" in s and "waiting for data" not in s


def test_every_rank_analyzed_does_not_ask_for_a_second_rank():
    s = undetermined_summary(_facts({"compute": 0.6, "other": 0.4}, ranks=(0, 1), world=2))
    assert s.startswith("The step goes to compute 60 %, work outside any traced operator 40 %")
    assert "second rank" not in s
