"""rules_engine/eligibility.py: a cost seen on one rank is machine noise on a contended host, unless a
measurement of every rank shows it material on all of them (metrics.toml every_rank_pays)."""

from ddpdoctor.resources import metric_params
from ddpdoctor.rules_engine.eligibility import every_rank_pays, is_sporadic
from ddpdoctor.rules_engine.engine import Finding

T = metric_params()["verdict"]


def _cm(ranks, agreement):
    return Finding("CM001", "x", "communication", "high", "t", "s", ranks, {}, [], cost=0.1, agreement=agreement)


def test_a_cost_on_one_rank_in_few_steps_is_sporadic():
    assert is_sporadic(_cm([0], 0.5), {"run.ranks_analyzed": 2}, T)
    assert not is_sporadic(_cm([0, 1], 0.5), {"run.ranks_analyzed": 2}, T)
    assert not is_sporadic(_cm([0], 0.9), {"run.ranks_analyzed": 2}, T)


def test_the_scripts_own_collective_on_every_rank_is_not_noise():
    facts = {"run.ranks_analyzed": 2, "python.loop_collective.share": 0.23}
    assert every_rank_pays("communication", facts, T) and not is_sporadic(_cm([0], 0.5), facts, T)
    # under the category's materiality, or another category: still sporadic
    small = {"run.ranks_analyzed": 2, "python.loop_collective.share": 0.01}
    assert not every_rank_pays("communication", small, T) and is_sporadic(_cm([0], 0.5), small, T)
    assert not every_rank_pays("dataloader", facts, T)
