from pathlib import Path

import pytest
from tracebuilder import gpu_step_trace

from ddpdoctor.bundle.discover import discover, rank_from_name
from ddpdoctor.errors import InputError


@pytest.mark.parametrize(
    "name,rank",
    [
        ("rank-3.Jul_15.pt.trace.json.gz", 3),
        ("rank3.json", 3),
        ("rank_12.json", 12),
        ("worker7.123.pt.trace.json", 7),
        ("node1_rank5.json", 5),
        ("trace_8_rank_1.json", 1),
        ("worker0.1623143089861.pt.trace.json.gz", 0),
        ("train.json", None),
        ("resnet_kineto.json.gz", None),
        ("framework3.json", None),
    ],
)
def test_rank_from_file_name(name, rank, tmp_path):
    assert rank_from_name(tmp_path / name) == rank


def test_distributed_info_wins_over_the_file_name(tmp_path):
    gpu_step_trace(rank=4, world_size=8).write(tmp_path / "rank0.json")
    d = discover([str(tmp_path)])
    assert d.ranks == [4] and d.by_rank[4][0].rank_source == "distributedInfo"


def test_lone_unranked_trace_is_rank_0(tmp_path):
    gpu_step_trace(rank=None).write(tmp_path / "train.json")
    d = discover([str(tmp_path)])
    assert d.ranks == [0] and d.by_rank[0][0].rank_source == "single trace"


def test_latest_window_by_default_all_on_request(tmp_path):
    for t in ("1623143089861", "1623143566756"):
        gpu_step_trace(rank=None).write(tmp_path / f"worker0.{t}.pt.trace.json")
    d = discover([str(tmp_path)])
    assert [f.path.name for f in d.by_rank[0]] == ["worker0.1623143566756.pt.trace.json"]
    assert len(d.skipped_windows[0]) == 1
    assert len(discover([str(tmp_path)], all_windows=True).by_rank[0]) == 2


def test_nested_folders_and_several_paths(tmp_path):
    (tmp_path / "node0" / "deep").mkdir(parents=True)
    (tmp_path / "node1").mkdir()
    gpu_step_trace(rank=0, world_size=2).write(tmp_path / "node0" / "deep" / "a.json", gz=True)
    gpu_step_trace(rank=1, world_size=2).write(tmp_path / "node1" / "b.json")
    d = discover([str(tmp_path / "node0"), str(tmp_path / "node1")])
    assert d.ranks == [0, 1] and not d.warnings


def test_same_file_twice_counts_once(tmp_path):
    p = gpu_step_trace(rank=0).write(tmp_path / "rank0.json")
    assert discover([str(p), str(tmp_path)]).ranks == [0]


def test_unranked_among_several_is_an_error(tmp_path):
    gpu_step_trace(rank=0, world_size=2).write(tmp_path / "rank0.json")
    gpu_step_trace(rank=None).write(tmp_path / "mystery.json")
    with pytest.raises(InputError, match="mystery.json: cannot tell which rank"):
        discover([str(tmp_path)])


def test_one_walk_per_folder_is_shared_by_traces_logs_and_bundle_records(tmp_path, monkeypatch):
    """#13 part 4: analyze walks each given folder once; traces, bundle records and logs read that walk."""
    import shutil

    from ddpdoctor.bundle import inputs as inputs_mod
    from ddpdoctor.diagnosis import run_analyze

    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "capture_gloo_2ranks_oom_skip_batch"
    run = tmp_path / "run"
    shutil.copytree(sample, run)
    (run / ".git").mkdir()
    (run / ".git" / "stray.log").write_text("RuntimeError: CUDA error: out of memory\n")  # pruned for logs
    calls = []
    real = inputs_mod.os.walk
    monkeypatch.setattr(inputs_mod.os, "walk", lambda p, *a, **k: (calls.append(p), real(p, *a, **k))[1])
    report = run_analyze([str(run)])
    assert calls == [str(run)]
    assert report.analysis is not None and report.facts.get("run.status") == "failed"  # bundle records read
    assert report.logs is not None and not any(".git" in str(f) for f in report.logs.files)
    assert any(f.rule == "FL001" for f in report.diagnosis.findings)  # logs read


def test_inputs_walk_prunes_skipped_folders_only_for_the_caller_that_asks(tmp_path):
    from ddpdoctor.bundle.inputs import Inputs

    (tmp_path / "a" / ".git" / "deep").mkdir(parents=True)
    (tmp_path / "a" / ".git" / "deep" / "x.log").write_text("x")
    (tmp_path / "a" / "y.log").write_text("y")
    inp = Inputs([str(tmp_path)])
    every = [f for _, _, files in inp.walk(tmp_path) for f in files]
    pruned = [f for _, _, files in inp.walk(tmp_path, {".git"}) for f in files]
    assert sorted(every) == ["x.log", "y.log"] and pruned == ["y.log"] and inp.walks_done == 1


def test_own_outputs_beside_the_traces_are_not_inputs(tmp_path):
    """`analyze out/` where out/ also holds the --json of an earlier analyze (any file name): the
    diagnosis is skipped without a 'skipped … not a profiler trace' warning; given alone it is exit 2."""
    from ddpdoctor.errors import NoTracesError

    gpu_step_trace(rank=0, world_size=1).write(tmp_path / "rank0.json")
    own = tmp_path / "my_diag.json"
    own.write_text('{\n "schema": "ddpdoctor.diagnosis/1",\n "verdict": {}\n}\n')
    d = discover([str(tmp_path)])
    assert d.ranks == [0] and not d.warnings
    with pytest.raises(InputError, match="a ddpdoctor output"):
        discover([str(own)])
    (tmp_path / "rank0.json").unlink()
    with pytest.raises(NoTracesError, match="only ddpdoctor's own outputs"):
        discover([str(tmp_path)])
    # a JSON that is neither ours nor a trace is still reported
    gpu_step_trace(rank=0, world_size=1).write(tmp_path / "rank0.json")
    (tmp_path / "other.json").write_text('{"schema": "someone-else/1"}')
    assert any("other.json" in w for w in discover([str(tmp_path)]).warnings)


def test_other_json_beside_the_traces_is_a_note_not_a_partial_result(tmp_path):
    """A config or an expected-output fixture in the trace folder leaves the job's traces whole: it is
    named ('ignored …'), the analysis is not partial; a trace that cannot be read still makes it partial."""
    from ddpdoctor.analysis import AnalyzeOptions, analyze

    for r in (0, 1):
        gpu_step_trace(rank=r, world_size=2).write(tmp_path / f"rank{r}.json")
    (tmp_path / "config.json").write_text('{"lr": 0.1, "batch_size": 32}')
    d = discover([str(tmp_path)])
    assert d.warnings == [f"ignored config.json (in {tmp_path}): JSON, but not a profiler trace (no 'traceEvents')"]
    assert analyze([str(tmp_path)], AnalyzeOptions(jobs=1, hta="off")).partial is False
    whole = (tmp_path / "rank1.json").read_bytes()
    (tmp_path / "rank1.json").write_bytes(whole[: len(whole) // 2])  # rank 1's trace cut short
    a = analyze([str(tmp_path)], AnalyzeOptions(jobs=1, hta="off"))
    assert a.partial is True and any(w.startswith("skipped") and "rank1.json" in w for w in a.warnings), a.warnings


@pytest.mark.parametrize(
    "name",
    ["rank0.pt.trace.json.gz.tmp.json", "rank0.pt.trace.json.tmp.gz", "rank0.part.json", "rank0.json.gz.partial.gz"],
)
def test_a_temporary_file_is_never_a_trace(name, tmp_path):
    """Issue 41: an export that stopped part-way leaves `….tmp.json`; the reader never takes it for a trace."""
    gpu_step_trace(rank=1, world_size=2).write(tmp_path / "rank1.pt.trace.json")
    gpu_step_trace(rank=0, world_size=2).write(tmp_path / name)  # even a whole one: its name says unfinished
    d = discover([str(tmp_path)])
    assert d.ranks == [1]
    assert any(w.startswith(f"ignored {name}") and "rank 0's trace was being written" in w for w in d.warnings)


def test_only_a_temporary_file_says_the_rank_stopped_while_writing(tmp_path):
    from ddpdoctor.errors import NoTracesError

    (tmp_path / "rank0.pt.trace.json.gz.tmp.json").write_text('{"traceEvents": [{"ph": "X", "na')
    with pytest.raises(NoTracesError, match="rank 0 stopped while writing its trace"):
        discover([str(tmp_path)])


def test_a_temporary_name_given_explicitly_is_read(tmp_path):
    p = tmp_path / "rank0.json.tmp.json"
    gpu_step_trace(rank=0).write(p)
    assert discover([str(p)]).ranks == [0]


def test_a_file_given_is_not_a_folder_in_the_message(tmp_path):
    from ddpdoctor.errors import NoTracesError

    log = tmp_path / "launcher.log"
    log.write_text("hello\n")
    with pytest.raises(NoTracesError) as err:
        discover([str(log)])
    assert f"among {log}" in str(err.value) and "under" not in str(err.value)
