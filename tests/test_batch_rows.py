"""rules_engine/input_work.py: ranks that run different batch sizes, or the same batch size of differently sized
samples (sequence lengths, image sizes), from each rank's usual input shapes."""

from ddpdoctor.rules_engine.input_work import input_work_facts


def test_ranks_with_different_batch_sizes():
    facts = {}
    input_work_facts({0: "[[32, 3, 256], [48, 3, 7]]", 1: "[[64, 3, 256], [48, 3, 7]]"}, facts)
    assert facts == {
        "cross.batch_rows_by_rank": "rank 0: 32, rank 1: 64",
        "cross.batch_rows_largest": 64,
        "cross.batch_rows_smallest": 32,
        "cross.largest_batch_rank": 1,
    }


def test_other_differences_are_not_batch_sizes():
    for by_rank in (
        {0: "[[32]]", 1: "[[64]]"},  # one dimension: no batch to tell
        {0: "[[[32], [32]]]", 1: "[[[64], [64]]]"},  # a list of tensors
        {0: "not json", 1: "[[64, 3]]"},
        {0: "[[32, 3]]"},
    ):
        facts = {}
        input_work_facts(by_rank, facts)
        assert facts == {}, by_rank


def test_two_ranks_share_the_largest_batch():
    facts = {}
    input_work_facts({0: "[[32, 8]]", 1: "[[64, 8]]", 2: "[[64, 8]]"}, facts)
    assert facts["cross.batch_rows_largest"] == 64 and "cross.largest_batch_rank" not in facts


def test_the_batch_is_the_second_input_of_an_embedding():
    facts = {}
    input_work_facts({0: "[[1000, 64], [32, 128], [], []]", 1: "[[1000, 64], [48, 128], [], []]"}, facts)
    assert facts["cross.batch_rows_by_rank"] == "rank 0: 32, rank 1: 48" and facts["cross.largest_batch_rank"] == 1


def test_two_inputs_differ_is_not_one_batch_size():
    facts = {}
    input_work_facts({0: "[[1000, 64], [32, 128]]", 1: "[[999, 64], [48, 128]]"}, facts)
    assert facts == {}


def test_sequence_lengths_differ_at_the_same_batch_size():
    facts = {}
    input_work_facts({0: "[[2000, 64], [16, 64], [], [], []]", 1: "[[2000, 64], [16, 384], [], [], []]"}, facts)
    assert facts == {
        "cross.input_work_by_rank": "rank 0: [16, 64]; rank 1: [16, 384]",
        "cross.input_work_ratio": 6.0,
        "cross.input_work_unit": "tokens",
        "cross.input_work_smallest_rank": 0,
        "cross.input_work_smallest_shape": "[16, 64]",
        "cross.input_work_largest_shape": "[16, 384]",
        "cross.input_work_largest_rank": 1,
    }


def test_batch_and_length_both_differ_is_work_not_batch_size():
    facts = {}
    input_work_facts({0: "[[32, 128]]", 1: "[[64, 256]]"}, facts)
    assert "cross.batch_rows_by_rank" not in facts
    assert facts["cross.input_work_ratio"] == 4.0 and facts["cross.input_work_largest_rank"] == 1


def test_image_sizes_are_pixels_and_the_larger_rank_may_be_rank_0():
    facts = {}
    input_work_facts({0: "[[8, 3, 448, 448]]", 1: "[[8, 3, 224, 224]]", 2: "[[8, 3, 224, 224]]"}, facts)
    assert facts["cross.input_work_unit"] == "pixels"
    assert facts["cross.input_work_ratio"] == 4.0
    assert facts["cross.input_work_largest_rank"] == 0 and facts["cross.input_work_smallest_rank"] == 1


def test_embedded_sequences_are_tokens_other_dims_elements():
    facts = {}
    input_work_facts({0: "[[4, 100, 32]]", 1: "[[4, 300, 32]]"}, facts)
    assert facts["cross.input_work_unit"] == "tokens"
    facts = {}
    input_work_facts({0: "[[4, 3, 100]]", 1: "[[4, 3, 300]]"}, facts)
    assert facts["cross.input_work_unit"] == "elements" and facts["cross.input_work_ratio"] == 3.0


def test_two_ranks_share_the_largest_input():
    facts = {}
    input_work_facts({0: "[[16, 64]]", 1: "[[16, 128]]", 2: "[[16, 128]]"}, facts)
    assert facts["cross.input_work_ratio"] == 2.0 and "cross.input_work_largest_rank" not in facts
