"""Hosts of plain traces (#29): tensorboard_trace_handler output (`{host}_{pid}.{time_ns}.pt.trace.json.gz`,
one folder per host) gets each rank's host, so the per-host clock correction applies: with the second
host's clock ahead or behind, the real straggler (8 ms late, on either host) is named and no rank of the
skewed host is."""

import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.analysis import AnalyzeOptions, analyze
from ddpdoctor.bundle.discover import Discovery, TraceFile
from ddpdoctor.bundle.hosts import host_from_name, identify_hosts

sys.path.insert(0, str(Path(__file__).parent))
from handler_traces import HOSTS, handler_job

SKEWS_MS = (-20.0, -5.0, -2.0, 2.0, 5.0, 20.0)
ROOT = Path(__file__).resolve().parent.parent


def run(*paths: Path):
    a = analyze([str(p) for p in paths], AnalyzeOptions(jobs=1, hta="off"))
    return a, sorted(s.rank for s in a.cross.stragglers)


# the fast tier keeps the smallest skew of each sign (the hardest to tell from the straggler) on both
# stragglers; the other skews are `slow`
FAST_SKEWS_MS = (-2.0, 2.0)


@pytest.mark.parametrize("straggler", [3, 6])
@pytest.mark.parametrize(
    "skew", [pytest.param(s, marks=() if s in FAST_SKEWS_MS else pytest.mark.slow) for s in SKEWS_MS]
)
def test_handler_file_names_give_the_hosts_and_the_clocks_are_aligned(tmp_path, skew, straggler):
    nodes = handler_job(tmp_path, skew, straggler)
    a, named = run(*nodes)
    assert named == [straggler]  # the real one, and no rank of the skewed host
    assert {s.rank: s.host for s in a.summaries} == {r: HOSTS[r // 4] for r in range(8)}
    assert set(a.hosts.source.values()) == {"file name"}
    unit = a.cross.clock.units[HOSTS[1]]
    assert unit.applied and unit.offset_us == pytest.approx(skew * 1000, abs=50)
    assert any("clock offsets corrected" in n and f"{skew:+.2f} ms" in n for n in a.cross.notes)


def test_without_host_identity_the_same_skew_hides_the_straggler(tmp_path):
    """The failure the issue reported, kept as the control: one folder, no host anywhere."""
    nodes = handler_job(tmp_path, 5.0, 3, naming="plain")
    flat = tmp_path / "flat"
    flat.mkdir()
    for n in nodes:
        for f in n.iterdir():
            f.rename(flat / f.name)
    a, named = run(flat)
    assert named != [3] and a.hosts.host == {}
    assert sum("hosts not identified" in n for n in a.cross.notes) == 1  # said once
    assert not any(n.startswith("host names unknown") for n in a.cross.notes)


def test_an_unskewed_set_is_unchanged(tmp_path):
    nodes = handler_job(tmp_path / "hosts", 0.0, 3)
    a, named = run(*nodes)
    plain = handler_job(tmp_path / "plain", 0.0, 3, naming="plain")
    flat = tmp_path / "flat"
    flat.mkdir()
    for n in plain:
        for f in n.iterdir():
            f.rename(flat / f.name)
    b, named_b = run(flat)
    assert named == named_b == [3]
    assert not a.cross.clock.applied and set(a.cross.clock_offset_us.values()) == {0.0}
    assert [round(s.late_us, 3) for s in a.cross.stragglers] == [round(s.late_us, 3) for s in b.cross.stragglers]


def test_the_traces_own_host_name_comes_first(tmp_path):
    """host_name inside the traces (the synthetic node0/node1) beats the handler's file names."""
    nodes = handler_job(tmp_path, -5.0, 6, host_name=True)
    a, named = run(*nodes)
    assert named == [6]
    assert {s.rank: s.host for s in a.summaries} == {r: f"node{r // 4}" for r in range(8)}
    assert set(a.hosts.source.values()) == {"trace"}
    assert a.cross.clock.units["node1"].applied


@pytest.mark.parametrize("skew", [-5.0, 20.0])
def test_node_folders_of_one_path_name_the_hosts(tmp_path, skew):
    """No host in the names or traces: each top-level folder of the one PATH is a node."""
    handler_job(tmp_path / "job", skew, 6, naming="plain")
    a, named = run(tmp_path / "job")
    assert named == [6]
    assert a.hosts.host == {r: f"node{r // 4}" for r in range(8)} and set(a.hosts.source.values()) == {"folder"}


def _tf(path: str, rank: int) -> TraceFile:
    return TraceFile(Path(path), 1, rank, "distributedInfo", 4, None, (0, 0, 0))


def test_host_from_the_handler_name():
    assert host_from_name("gpu-a01.cluster_x_4000.1732500000000000000.pt.trace.json.gz") == "gpu-a01.cluster_x"
    assert host_from_name("node7_123.1700000000000000000.pt.trace.json") == "node7"
    for name in (
        "rank3.pt.trace.json",
        "123.1700000000000000000.pt.trace.json",
        "worker_3.json",
        "worker0_step_12.1694128201545.pt.trace.json.gz",  # PARAM's DLRM traces: ms time, rank name
        "rank3_4000.1732500000000000000.pt.trace.json",
    ):  # a worker name per rank, not a host
        assert host_from_name(name) is None


def test_folders_sharing_a_rank_are_not_nodes(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    disc = Discovery(
        {0: [_tf(f"{tmp_path}/a/x.json", 0)], 1: [_tf(f"{tmp_path}/b/y.json", 1)]},
        {0: [_tf(f"{tmp_path}/b/old.json", 0)]},
        2,
    )
    ids = identify_hosts({0: None, 1: None}, disc, [str(tmp_path)])
    assert ids.host == {} and "hosts not identified" in ids.note
    disc.skipped_windows = {}
    ids = identify_hosts({0: None, 1: None}, disc, [str(tmp_path)])
    assert ids.host == {0: "a", 1: "b"} and ids.note is None
    # a host name for one rank only: folders are not mixed in, the others stay unknown and that is said
    ids = identify_hosts({0: "gpu7", 1: None}, disc, [str(tmp_path)])
    assert ids.host == {0: "gpu7"} and "host unknown for rank 1 of 2" in ids.note


def test_verbose_output_and_verdict(tmp_path):
    nodes = handler_job(tmp_path, 5.0, 3)
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", *map(str, nodes), "-v", "-j", "1", "--hta", "off"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())  # lines wrapped at the terminal width, joined
    assert out.startswith("Verdict: imbalance-bound")
    assert f"hosts: {HOSTS[0]} (ranks 0-3), {HOSTS[1]} (ranks 4-7); from the trace handler's file names" in out
    assert f"{HOSTS[1]} +5.00 ms" in out and "Straggler: rank 3 " in out
