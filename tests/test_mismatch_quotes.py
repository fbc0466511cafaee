"""DDP's construction check quoted with its facts (issue 39): which parameter, which sizes, on which rank against
which (logs/families.py, logs/mismatch_quotes.py), and each side of a collective mismatch with only what the
report holds."""

from pathlib import Path

from ddpdoctor.logs.analyze import analyze_logs
from ddpdoctor.logs.mismatch_quotes import side_facts


def _facts(tmp_path: Path, text: str, name: str) -> dict:
    (tmp_path / name).write_text(text)
    a = analyze_logs([str(tmp_path)])
    assert a is not None
    return a.facts


def test_the_size_check_names_the_rank_that_logs_it_not_process_0(tmp_path):
    f = _facts(
        tmp_path,
        "[rank1]: RuntimeError: [1]: params[0] in this process with sizes [384, 128] appears not to match sizes "
        "of the same param in process 0.\n",
        "output.log",
    )
    assert f["failure.mismatch.aspects"] == ["model"]
    assert (f["failure.mismatch.param_rank"], f["failure.mismatch.param_reference_rank"]) == (1, 0)
    assert (f["failure.mismatch.param_index"], f["failure.mismatch.param_sizes"]) == (0, "[384, 128]")
    assert f["failure.mismatch.param_aspect"] == "sizes" and f["failure.mismatch.behind_rank"] == 1


def test_the_stride_check(tmp_path):
    f = _facts(
        tmp_path,
        "[rank2]: RuntimeError: params[5] in this process with strides [1, 64] appears not to match strides "
        "of the same param in process 0.\n",
        "output.log",
    )
    assert (f["failure.mismatch.param_rank"], f["failure.mismatch.param_index"]) == (2, 5)
    assert (f["failure.mismatch.param_sizes"], f["failure.mismatch.param_aspect"]) == ("[1, 64]", "strides")


def test_the_count_check(tmp_path):
    f = _facts(
        tmp_path,
        "RuntimeError: DDP expects same model across all ranks, but Rank 1 has 224 params, "
        "while rank 0 has inconsistent 222 params.\n",
        "output.log",
    )
    assert (f["failure.mismatch.param_count_a"], f["failure.mismatch.param_count_b"]) == (224, 222)
    assert (f["failure.mismatch.param_rank"], f["failure.mismatch.param_reference_rank"]) == (1, 0)
    assert f["failure.mismatch.param_sizes"] is None


def test_each_side_holds_only_what_the_report_gives():
    f = {
        "failure.mismatch.seq_a": 485,
        "failure.mismatch.shape_a": "[25]",
        "failure.mismatch.dtype_a": "Float",
        "failure.mismatch.seq_b": None,
        "failure.mismatch.shape_b": None,
        "failure.mismatch.dtype_b": None,
    }
    side_facts(f)
    assert f["failure.mismatch.side_a"] == "sequence 485, shape [25], dtype Float"
    assert f["failure.mismatch.side_b"] is None
