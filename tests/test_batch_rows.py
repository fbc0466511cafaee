"""rules_engine/facts.py: ranks that run different batch sizes, from each rank's usual input shapes."""

from ddpdoctor.rules_engine.facts import _batch_row_facts


def test_ranks_with_different_batch_sizes():
    facts = {}
    _batch_row_facts({0: "[[32, 3, 256], [48, 3, 7]]", 1: "[[64, 3, 256], [48, 3, 7]]"}, facts)
    assert facts == {
        "cross.batch_rows_by_rank": "rank 0: 32, rank 1: 64",
        "cross.batch_rows_largest": 64,
        "cross.batch_rows_smallest": 32,
        "cross.largest_batch_rank": 1,
    }


def test_other_differences_are_not_batch_sizes():
    for by_rank in (
        {0: "[[32, 128]]", 1: "[[32, 256]]"},  # sequence lengths differ
        {0: "[[32, 128]]", 1: "[[64, 256]]"},  # both differ
        {0: "[[32]]", 1: "[[64]]"},  # one dimension: no batch to tell
        {0: "[[[32], [32]]]", 1: "[[[64], [64]]]"},  # a list of tensors
        {0: "not json", 1: "[[64, 3]]"},
        {0: "[[32, 3]]"},
    ):
        facts = {}
        _batch_row_facts(by_rank, facts)
        assert facts == {}, by_rank


def test_two_ranks_share_the_largest_batch():
    facts = {}
    _batch_row_facts({0: "[[32, 8]]", 1: "[[64, 8]]", 2: "[[64, 8]]"}, facts)
    assert facts["cross.batch_rows_largest"] == 64 and "cross.largest_batch_rank" not in facts


def test_the_batch_is_the_second_input_of_an_embedding():
    facts = {}
    _batch_row_facts({0: "[[1000, 64], [32, 128], [], []]", 1: "[[1000, 64], [48, 128], [], []]"}, facts)
    assert facts["cross.batch_rows_by_rank"] == "rank 0: 32, rank 1: 48" and facts["cross.largest_batch_rank"] == 1


def test_two_inputs_differ_is_not_one_batch_size():
    facts = {}
    _batch_row_facts({0: "[[1000, 64], [32, 128]]", 1: "[[999, 64], [48, 128]]"}, facts)
    assert facts == {}
