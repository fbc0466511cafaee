"""The message catalogue (rules/messages/): checked at load, every excerpt found by the matcher, fixes computed
from the run's facts, and the kinds issue 26 listed as missed answered by the catalogue's cause and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_no_placeholders import PLACEHOLDER

from ddpdoctor.errors import InputError
from ddpdoctor.logs import analyze_logs
from ddpdoctor.logs.catalogue import CatalogueError, default_messages, load_catalogue, load_family
from ddpdoctor.logs.messages import _Lookup, scan
from ddpdoctor.rules_engine.facts import merge_facts
from ddpdoctor.rules_engine.registry import build_ruleset
from ddpdoctor.rules_engine.verdict import diagnose

GOOD = """family = "{stem}"
sources = ["NVIDIA/nccl@v2.21.5-1:src/init.cc"]
[[message]]
id = "x.dup"
patterns = ['Duplicate GPU detected : rank (?P<a>\\d+)']
kind = "launch"
role = "cause"
cause = "two ranks on one GPU"
needs = ["host.gpu_count"]
[message.fix]
title = "rank {{match.a}} shares a GPU"
change = "set the device from LOCAL_RANK"
[[message.excerpt]]
text = "NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000"
source = "https://github.com/NVIDIA/Megatron-LM/issues/661"
"""


def _write(tmp_path: Path, text: str, stem: str = "nccl_init") -> Path:
    folder = tmp_path / "messages"
    folder.mkdir(exist_ok=True)
    (folder / f"{stem}.toml").write_text(text.format(stem=stem))
    return folder


def test_a_good_file_loads(tmp_path):
    fams = load_catalogue(_write(tmp_path, GOOD))
    assert [m.id for m in fams[0].messages] == ["x.dup"]


@pytest.mark.parametrize(
    "broken, said",
    [
        (
            GOOD.replace('needs = ["host.gpu_count"]', 'needs = ["host.no_such_fact"]'),
            "unknown fact 'host.no_such_fact'",
        ),
        (GOOD.replace("rank {{match.a}} shares", "rank {{match.b}} shares"), "no pattern has a group (?P<b>"),
        (GOOD.replace("NCCL WARN Duplicate GPU", "NCCL WARN Some other GPU"), "matches no line of its excerpts"),
        (GOOD[: GOOD.index("[[message.excerpt]]")], "at least one [[message.excerpt]]"),
        (
            GOOD.replace(
                '[message.fix]\ntitle = "rank {{match.a}} shares a GPU"\nchange = "set the device from LOCAL_RANK"\n',
                "",
            ),
            "an entry without a fix",
        ),
        (GOOD.replace('kind = "launch"', 'kind = "bad luck"'), "kind must be one of"),
        (
            GOOD.replace(
                "patterns = ['Duplicate", "parse = ['Duplicate GPU', 'Some other GPU']\npatterns = ['Duplicate"
            ),
            "matches no line of its excerpts",
        ),
        (GOOD.replace("patterns = ['Duplicate GPU detected : rank (?P<a>\\d+)']\n", ""), "needs patterns"),
    ],
)
def test_a_bad_entry_is_refused_naming_file_and_entry(tmp_path, broken, said):
    with pytest.raises(CatalogueError) as exc:
        load_catalogue(_write(tmp_path, broken))
    msg = str(exc.value)
    assert said in msg and "nccl_init.toml" in msg and "\n" not in msg
    assert isinstance(exc.value, InputError) and exc.value.exit_code == 2


def test_an_entry_may_hold_only_the_wording_the_parser_reads(tmp_path):
    text = GOOD.replace(
        "patterns = ['Duplicate GPU detected : rank (?P<a>\\d+)']",
        "parse = ['Duplicate GPU detected : rank (?P<a>\\d+)']",
    )
    text = text.replace("rank {{match.a}} shares", "a rank shares")
    (msg,) = load_catalogue(_write(tmp_path, text))[0].messages
    assert not msg.patterns and [p.pattern for p in msg.parse] == [r"Duplicate GPU detected : rank (?P<a>\d+)"]


def test_the_built_in_catalogue_loads_and_covers_the_families():
    fams = {f.name for f in load_catalogue()}
    assert {
        "ddp_reducer",
        "process_group_nccl",
        "process_group_gloo",
        "c10d_store",
        "elastic",
        "dataloader",
        "nccl_init",
        "nccl_shm",
        "nccl_p2p",
        "nccl_ib",
        "nccl_net",
        "nccl_cuda",
        "gloo",
    } <= fams


PREFIXES = [
    "",
    "[rank3]: ",
    "[default1]:",
    "2025-01-02 03:04:05,678 - ERROR - ",
    "torch.distributed.DistBackendError: ",
]


def _parsed(msg, text: str):
    """The parser's reading of a line with the entry's wording (its `parse` patterns), None when none finds it."""
    return next((m for p in msg.parse if (m := p.search(text))), None)


@pytest.mark.parametrize("msg", default_messages(), ids=lambda m: m.id)
def test_every_excerpt_is_found_behind_real_prefixes(msg):
    """By the message engine behind every prefix; an excerpt of a form only the parser reads, by the entry's
    `parse` wording (the parser removes the prefixes before it applies it: some forms are anchored)."""
    for ex in msg.excerpts:
        bare = ex.text.splitlines()
        if not any(msg.match(line) for line in bare):
            assert any(_parsed(msg, line) for line in bare), ex.text[:80]
            continue
        for prefix in PREFIXES:
            lines = [["f.log", i + 1, prefix + line, None, None] for i, line in enumerate(bare)]
            assert msg.id in scan(lines), (prefix, ex.text[:80])


def test_an_entry_the_parser_alone_reads_is_not_a_message_of_its_own():
    """`parse` without `patterns`: the parser builds its event from the wording; the message engine does not
    report the entry (failure.message.* are unchanged by it)."""
    msg = next(m for m in default_messages() if m.id == "pg_nccl.work_state")
    line = msg.excerpts[0].text
    assert not msg.patterns and _parsed(msg, line)
    assert "pg_nccl.work_state" not in scan([["f.log", 1, line, None, None]])


@pytest.mark.parametrize("msg", default_messages(), ids=lambda m: m.id)
def test_every_fix_reads_without_placeholders_when_no_fact_is_known(msg):
    lines = [line for ex in msg.excerpts for line in ex.text.splitlines()]
    m = next(m for line in lines if (m := msg.match(line) or _parsed(msg, line)))
    groups = {k: v for k, v in m.groupdict().items() if v is not None}
    for t in (msg.fix_title, msg.fix_change):
        text, missing = t.render(_Lookup({}, groups))
        # a text that needs a fact is not said (docs/DESIGN.md): with none known, the fix must still be offered
        assert text is not None, (
            f"{msg.id}: the fix cannot be said without {sorted(missing)}: add a variant without them"
        )
        assert not PLACEHOLDER.search(text), text
    assert msg.cause and not PLACEHOLDER.search(msg.cause)


def _top(tmp_path: Path, name: str, text: str, known: dict | None = None):
    (tmp_path / name).write_text(text)
    known = known or {}
    la = analyze_logs([str(tmp_path)], known_facts=known)
    facts = merge_facts(known, la.facts)
    findings = diagnose(facts, build_ruleset(), log_search=la.search).findings
    return la.facts, findings[0]


def test_bus_error_with_a_small_dev_shm_names_its_size_and_the_size_to_ask_for(tmp_path):
    facts, top = _top(
        tmp_path,
        "rank0.log",
        "[rank0]: RuntimeError: DataLoader worker (pid 4301) is killed by signal: Bus error. It is "
        "possible that dataloader's workers are out of shared memory. Please try to raise your shared "
        "memory limit.\n",
        {"host.shm_bytes": 64 << 20, "config.dataloader.num_workers": 6, "host.local_world_size": 2},
    )
    assert facts["failure.message.id"] == "dataloader.bus_error_shm"
    first = top.fixes[0]
    assert "/dev/shm" in first.title
    assert "67.1 MB" in first.change and "--shm-size=12g" in first.change and "sizeLimit: 12Gi" in first.change


def test_bus_error_with_a_large_dev_shm_does_not_ask_for_more(tmp_path):
    _facts, top = _top(
        tmp_path,
        "rank0.log",
        "RuntimeError: DataLoader worker (pid 1) is killed by signal: Bus error.\n",
        {"host.shm_bytes": 64 << 30},
    )
    assert "should be enough" in top.fixes[0].change and "--shm-size=" not in top.fixes[0].change


def test_nccl_shm_failure_gets_the_shm_fix_not_an_interface(tmp_path):
    facts, top = _top(
        tmp_path,
        "nccl.log",
        "node1:9621:9691 [1] misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-fjwOOB "
        "to 9637892 bytes\n[rank1]: torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error, NCCL version "
        "2.21.5\n",
    )
    assert facts["failure.message.id"] == "nccl.shm.no_space"
    assert "--shm-size" in top.fixes[0].change and "NCCL_SHM_DISABLE=1" in top.fixes[0].change


def test_duplicate_gpu_names_both_ranks_and_local_rank(tmp_path):
    _facts, top = _top(
        tmp_path,
        "out.log",
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1691, invalid "
        "usage, NCCL version 2.19.3\n[rank1]: Last error:\n[rank1]: Duplicate GPU detected : rank 1 and "
        "rank 0 both on CUDA device 1000\n",
    )
    assert top.rule == "FL010"
    assert top.fixes[0].title.startswith("Ranks 1 and 0 share one GPU")
    assert 'device_id=torch.device("cuda", local_rank)' in top.fixes[0].change


def test_marked_ready_twice_gets_its_own_fix_not_the_generic_one(tmp_path):
    _facts, top = _top(
        tmp_path,
        "out.log",
        "[rank1]: RuntimeError: Expected to mark a variable ready only once. This error is caused by "
        "one of the following reasons: 1) Use of a module parameter outside the `forward` function.\n",
    )
    assert "use_reentrant=False" in top.fixes[0].change and "static_graph=True" in top.fixes[0].change
    assert "used twice in the forward" in top.summary


def test_unknown_device_before_a_store_timeout_is_the_cause(tmp_path):
    facts, top = _top(
        tmp_path,
        "out.log",
        "[rank1]:[W1105 13:37:10.134661876 ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank 1]  using "
        "GPU 1 to perform barrier as devices used by this process are currently unknown.\n"
        "[rank1]: torch.distributed.DistStoreError: wait timeout after 600000ms, keys: "
        "/default_pg/0//cuda//0\n",
    )
    assert facts["failure.message.id"] == "pg_nccl.barrier_device_unknown"
    assert top.rule == "FL012" and "device_id=" in top.fixes[0].change


def test_the_same_warning_without_a_failure_is_only_context(tmp_path):
    (tmp_path / "out.log").write_text(
        "[rank0]:[W ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank 0]  using GPU 0 "
        "to perform barrier as devices used by this process are currently unknown.\n"
    )
    facts = analyze_logs([str(tmp_path)]).facts
    assert facts["failure.message.ids"] == ["pg_nccl.barrier_device_unknown"]
    assert facts["failure.message.id"] is None


def test_nccl_versions_that_differ_between_hosts_are_a_finding_before_any_failure(tmp_path):
    facts, top = _top(
        tmp_path,
        "nccl.log",
        "node1:100:100 [0] NCCL INFO NCCL version 2.18.3+cuda12.1\n"
        "node2:200:200 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n",
    )
    assert facts["nccl.versions_by_host"] == {"node1": "2.18.3", "node2": "2.21.5"}
    assert facts["failure.root_cause.kind"] is None
    assert top.rule == "NET006" and "node1: 2.18.3, node2: 2.21.5" in top.summary


def test_one_nccl_version_everywhere_is_quiet(tmp_path):
    (tmp_path / "nccl.log").write_text(
        "node1:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\nnode2:2:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    )
    facts = analyze_logs([str(tmp_path)]).facts
    assert facts["nccl.versions_differ"] is False


def test_a_rank_and_file_free_error_reads_without_placeholders(tmp_path):
    _facts, top = _top(tmp_path, "out.log", "RuntimeError: boom\n")
    text = top.summary + "\n".join(f"{fx.title}\n{fx.change}" for fx in top.fixes)
    assert not PLACEHOLDER.search(text), text
    assert "One rank raised RuntimeError" in text and "in the first traceback of the log" in text


def test_the_cli_refuses_a_bad_catalogue_with_one_line_and_exit_2(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import ddpdoctor.logs.catalogue as cat
    from ddpdoctor.cli import main

    folder = _write(tmp_path, GOOD.replace('needs = ["host.gpu_count"]', 'needs = ["host.no_such_fact"]'))
    monkeypatch.setattr(cat, "rules_dir", lambda: folder.parent)
    cat.default_messages.cache_clear()
    try:
        res = CliRunner().invoke(main, ["rules", "list", "--no-config"])
    finally:
        cat.default_messages.cache_clear()
    assert res.exit_code == 2, res.output
    err = (res.stderr if hasattr(res, "stderr") and res.stderr else res.output).strip()
    assert "nccl_init.toml: x.dup: needs reads unknown fact 'host.no_such_fact'" in err
    assert "Traceback" not in res.output and len(err.splitlines()) == 1


# ---------------------------------------------------------------- a cause message is failure evidence on its own


def test_nccl_warn_lines_alone_are_a_failure_presented_by_fl017(tmp_path):
    """No traceback, no exit: the catalogued cause line is the root cause (kind message), with its fix."""
    facts, top = _top(
        tmp_path,
        "rank1.log",
        "2024-03-01 10:00:00 node1:9621:9691 [1] misc/shmutils.cc:72 NCCL WARN Error: failed to extend "
        "/dev/shm/nccl-fjwOOB to 9637892 bytes\n",
        {"host.shm_bytes": 64 << 20},
    )
    assert facts["failure.present"] is True
    assert facts["failure.root_cause.kind"] == "message" and facts["failure.root_cause.message_kind"] == "container"
    assert facts["failure.root_cause.line_no"] == 1
    assert top.rule == "FL017" and "failed to extend /dev/shm/nccl-fjwOOB" in top.summary
    assert "--shm-size" in top.fixes[0].change and "/dev/shm on this host is" in top.fixes[0].change


def test_a_cause_message_outranks_a_timeout_it_leads_to(tmp_path):
    """root_cause_priority puts known_message ahead of timeout: the waiting rank's watchdog is the symptom."""
    facts, top = _top(
        tmp_path,
        "job.log",
        "[rank1]: node1:1:2 [1] include/shm.h:27 NCCL WARN Call to shm_open failed : Permission denied\n"
        "[rank0]: [E ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600004 "
        "milliseconds before timing out.\n",
    )
    assert facts["failure.timeout.present"] is True
    assert facts["failure.root_cause.kind"] == "message" and facts["failure.message.id"] == "nccl.shm.no_permission"
    assert top.rule == "FL017" and "chmod 1777 /dev/shm" in top.fixes[0].change


def test_a_message_on_the_exception_line_stays_with_fl010(tmp_path):
    """The reducer's error is both a traceback's last line and a cause message: FL010 keeps it, catalogue fix first."""
    facts, top = _top(
        tmp_path,
        "rank0.log",
        '[rank0]: Traceback (most recent call last):\n[rank0]:   File "train.py", line 3, in <module>\n'
        "[rank0]: RuntimeError: Expected to mark a variable ready only once. This error is caused by one "
        "of the following reasons: 1) Use of a module parameter outside the `forward` function.\n",
    )
    assert facts["failure.root_cause.kind"] == "exception" and facts["failure.message.on_root"] is True
    assert top.rule == "FL010"


def test_ucx_sigbus_line_is_a_kill_with_the_shm_fix(tmp_path):
    """UCX's handler line ("Caught signal 7 (Bus error: …)", ucs/debug/debug.c) is the process's death by SIGBUS."""
    facts, top = _top(
        tmp_path, "out.log", "[8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)\n"
    )
    assert facts["failure.root_cause.kind"] == "killed" and facts["failure.killed.signal"] == "SIGBUS"
    assert facts["failure.message.id"] == "ucx.caught_sigbus"
    assert top.rule == "FL008" and "/dev/shm" in top.fixes[0].title


def test_syncbatchnorm_on_a_cpu_module_names_syncbatchnorm_and_the_cpu_alternative(tmp_path):
    facts, top = _top(
        tmp_path,
        "out.log",
        "[rank0]: ValueError: SyncBatchNorm layers only work with GPU modules\n"
        "[rank1]: ValueError: SyncBatchNorm layers only work with GPU modules\n",
    )
    assert facts["failure.message.id"] == "syncbn.cpu_module"
    assert "SyncBatchNorm" in top.fixes[0].title and "BatchNorm on CPU" in top.fixes[0].title
    assert "convert_sync_batchnorm" in top.fixes[0].change


def _gloo_size_mismatch(got: int, want: int) -> str:
    return (
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n  what():  [enforce fail at "
        f"/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. {got} vs {want}. "
        "Received data size doesn't match expected size.\n"
    )


@pytest.mark.parametrize(("got", "want", "factor"), [(8, 4, 2), (4, 8, 2), (4096, 1024, 4), (16, 2, 8)])
def test_a_gloo_size_ratio_of_an_element_size_names_the_dtype(tmp_path, got, want, factor):
    facts, top = _top(tmp_path, "rank0.log", _gloo_size_mismatch(got, want))
    assert facts["failure.message.id"] == "gloo.size_mismatch"
    assert "dtype" in top.fixes[0].title and f"a factor of {factor}" in top.fixes[0].title
    assert "float64" in top.fixes[0].change and "float32" in top.fixes[0].change


@pytest.mark.parametrize(("got", "want"), [(1046204, 1040256), (12, 4), (8773728, 8386560)])
def test_a_gloo_size_mismatch_no_element_size_explains_asks_for_equal_sizes(tmp_path, got, want):
    _facts, top = _top(tmp_path, "rank0.log", _gloo_size_mismatch(got, want))
    assert "dtype" not in top.fixes[0].title and "different sizes" in top.fixes[0].title


def test_a_performance_warning_in_the_logs_is_a_slowdown_fact_with_its_fix(tmp_path):
    (tmp_path / "rank1.log").write_text(
        "[rank1]: /home/me/proj/train.py:61: UserWarning: Creating a tensor from a list of numpy.ndarrays is "
        "extremely slow. Please consider converting the list to a single numpy.ndarray with numpy.array() before "
        "converting to a tensor. (Triggered internally at /pytorch/torch/csrc/utils/tensor_new.cpp:252.)\n"
    )
    facts = analyze_logs([str(tmp_path)]).facts
    assert facts["logs.slowdown.id"] == "torch.tensor_from_ndarray_list" and facts["logs.slowdown.slows"] == "input"
    assert "Stack" in facts["logs.slowdown.fix_title"] and "np.stack" in facts["logs.slowdown.fix"]
    # the user's file:line without its directories, torch's own place cut off
    assert facts["logs.slowdown.text"].startswith("train.py:61: UserWarning: Creating a tensor")
    assert "/home/me" not in facts["logs.slowdown.text"] and "Triggered" not in facts["logs.slowdown.text"]
    assert facts["logs.slowdown.ranks"] == [1]
    # a warning is not a failure
    assert facts["failure.message.id"] is None


def test_no_performance_warning_no_slowdown_facts(tmp_path):
    (tmp_path / "rank0.log").write_text("step 10 loss 0.5\n")
    assert not any(k.startswith("logs.slowdown.") for k in analyze_logs([str(tmp_path)]).facts)


def test_slows_is_refused_on_a_cause_message(tmp_path):
    bad = tmp_path / "x.toml"
    bad.write_text(
        'family = "x"\ntitle = "x"\nsources = ["s"]\n[[message]]\nid = "x.y"\npatterns = ["boom"]\n'
        'kind = "code"\nrole = "cause"\nslows = "input"\ncause = "c"\n[message.fix]\ntitle = "t"\nchange = "c"\n'
        '[[message.excerpt]]\ntext = "boom"\nsource = "s"\n'
    )
    with pytest.raises(CatalogueError, match="slows must be one of input, compute, communication"):
        load_family(bad)
