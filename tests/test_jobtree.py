"""The job's whole process tree for host contention (capture/agent/jobtree.py, bundle/evidence.py):
"outside the job" is what runs in processes that are not descendants of the `ddpdoctor run` process.
Unit tests on a /proc built in code; end to end on real 2-rank torchrun jobs (CPU, gloo)."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from subprocesses import project_env

from ddpdoctor.bundle.evidence import contention_facts

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "agent_jobtree_under_test", ROOT / "ddpdoctor" / "capture" / "agent" / "jobtree.py"
)
jobtree = importlib.util.module_from_spec(spec)
spec.loader.exec_module(jobtree)


def fake_proc(procs: dict[int, dict]):
    """procs: pid -> {"ppid", "threads": {tid: state}, "cpu": (utime, stime, cutime, cstime) in ticks}."""
    files = {}
    for pid, p in procs.items():
        u, s, cu, cs = p.get("cpu", (0, 0, 0, 0))
        files[f"/proc/{pid}/stat"] = f"{pid} (py (x)) S {p['ppid']} 0 0 0 0 0 0 0 0 0 {u} {s} {cu} {cs} 20 0"
        for tid, state in p["threads"].items():
            files[f"/proc/{pid}/task/{tid}/stat"] = f"{tid} (t) {state} {p['ppid']} 0"
            kids = [str(c) for c, q in procs.items() if q["ppid"] == pid and tid == pid]
            files[f"/proc/{pid}/task/{tid}/children"] = " ".join(kids)

    def listdir(path):
        pid = int(path.split("/")[2])
        if pid not in procs:
            raise FileNotFoundError(path)
        return [str(t) for t in procs[pid]["threads"]]

    return files.get, listdir


# the run process 10 -> torchrun 11 -> ranks 12, 13; rank 12's loader worker 14 -> its grandchild 15;
# 99 is another user's process (a sibling of 10 under 1)
PROCS = {
    1: {"ppid": 0, "threads": {1: "S"}},
    10: {"ppid": 1, "threads": {10: "S", 20: "R"}, "cpu": (100, 0, 0, 0)},  # a pump thread running
    11: {"ppid": 10, "threads": {11: "R"}, "cpu": (50, 50, 0, 0)},
    12: {"ppid": 11, "threads": {12: "R", 21: "R", 22: "S"}, "cpu": (1000, 100, 200, 0)},
    13: {"ppid": 11, "threads": {13: "R", 23: "S"}, "cpu": (900, 100, 0, 0)},
    14: {"ppid": 12, "threads": {14: "S"}, "cpu": (10, 0, 0, 0)},
    15: {"ppid": 14, "threads": {15: "R"}, "cpu": (300, 0, 0, 0)},
    99: {"ppid": 1, "threads": {99: "R", 98: "R"}, "cpu": (5000, 0, 0, 0)},
}


def test_tree_runnable_and_cpu_of_the_job_only():
    read, listdir = fake_proc(PROCS)
    pids = jobtree.tree(10, read, listdir)
    assert sorted(pids) == [10, 11, 12, 13, 14, 15]
    assert jobtree.runnable_threads(pids, read, listdir) == 6  # 20, 11, 12, 21, 13, 15: not 99's two
    assert jobtree.cpu_seconds(pids, read, hz=100) == pytest.approx((100 + 100 + 1300 + 1000 + 10 + 300) / 100)


def test_job_root_is_the_run_process_when_it_is_an_ancestor():
    read, _ = fake_proc(PROCS)
    assert jobtree.job_root({"DDPDOCTOR_LAUNCHER_PID": "10"}, pid=13, read=read) == (10, "ddpdoctor run")
    # a launcher pid that is not this rank's ancestor (a stale variable): the torchrun agent instead
    assert jobtree.job_root({"DDPDOCTOR_LAUNCHER_PID": "99", "TORCHELASTIC_RUN_ID": "x"}, pid=13, read=read) == (
        11,
        "torchrun agent",
    )
    assert jobtree.job_root({"DDPDOCTOR_LAUNCHER_PID": "99"}, pid=13, read=read) is None
    assert jobtree.job_root({"DDPDOCTOR_LAUNCHER_PID": "junk"}, pid=13, read=read) is None


def test_a_vanished_process_is_skipped():
    read, listdir = fake_proc({k: v for k, v in PROCS.items() if k != 14})
    assert sorted(jobtree.tree(10, read, listdir)) == [10, 11, 12, 13]
    assert jobtree.cpu_seconds([404], read) is None


def _rank(job: dict | None, own: list[int], runnable: list[int], cpus: int = 2) -> dict:
    con = {
        "host": {"total_s": 10.0, "idle_s": 2.0, "steal_s": 0.0},
        "process_cpu_s": 3.0,
        "children_cpu_s": 0.0,
        "runnable_samples": runnable,
        "own_runnable_samples": own,
        "host_cpus": cpus,
        "local_world_size": 2,
        "wall_s": 5.0,
    }
    if job is not None:
        con["job"] = job
    return {"hostname": "h", "evidence": {"contention": con}}


def test_facts_from_the_job_tree_replace_the_per_rank_sum():
    # the job's tree held all the running work: nothing outside, whatever the ranks counted of their own
    job = {
        "root": "ddpdoctor run",
        "processes": 6,
        "cpu_s": 7.5,
        "runnable_samples": [3, 4, 3],
        "outside_runnable_samples": [0, 1, -1],
    }
    facts = contention_facts({0: _rank(job, [], [3, 5, 2]), 1: _rank(None, [1, 1, 1], [3, 5, 2])})
    assert facts["host.contention.other_runnable_per_cpu"] == 0.0
    assert facts["host.contention.other_busy_share"] == pytest.approx(0.8 - 0.75)
    assert facts["host.contention.job_processes"] == 6
    # another process ran beside the job: 2 runnable outside it on 2 CPUs
    job = dict(job, outside_runnable_samples=[2, 2, 2], cpu_s=4.0)
    facts = contention_facts({0: _rank(job, [], [5, 6, 5]), 1: _rank(None, [1, 1, 1], [5, 6, 5])})
    assert facts["host.contention.other_runnable_per_cpu"] == 1.0
    assert facts["host.contention.other_busy_share"] == pytest.approx(0.4)


def test_the_job_tree_is_subtracted_from_its_own_window_only():
    # Recorded (value_error_rank1_step7, idle host): rank 0 measured the tree over 0.73 s (host 1.44 s of
    # CPU time, 0.68 idle, the tree 0.76 s: nothing outside); rank 1 failed 15 ms into its window and read
    # 0.02 s of host time, none idle.  Mixing rank 1's "100 % busy" into the host's busy share made 24 %
    # "outside the job" and fired IM004 on an idle host.
    job = {"root": "ddpdoctor run", "processes": 6, "cpu_s": 0.76, "runnable_samples": [3, 2, 2],
           "outside_runnable_samples": [0, 0, 0]}  # fmt: skip
    r0 = _rank(job, [], [2, 1, 1])
    r0["evidence"]["contention"]["host"] = {"total_s": 1.44, "idle_s": 0.68, "steal_s": 0.0}
    r1 = _rank(None, [1], [3])
    r1["evidence"]["contention"].update(host={"total_s": 0.02, "idle_s": 0.0, "steal_s": 0.0}, wall_s=0.015)
    r1["evidence"]["contention"]["thread"] = {"cpu_s": 0.012, "nivcsw": 43, "nvcsw": 6}
    facts = contention_facts({0: r0, 1: r1})
    assert facts["host.contention.other_busy_share"] == 0.0
    # a window too short for /proc/stat's ticks gives no rate either (43 switches in 15 ms is not 2865/s)
    assert "host.contention.involuntary_switches_per_s" not in facts
    # the same short reading alone measures nothing
    assert "host.contention.other_busy_share" not in contention_facts({1: r1})


def test_old_bundles_keep_the_per_rank_counts():
    facts = contention_facts({0: _rank(None, [1, 1], [4, 4]), 1: _rank(None, [1, 1], [4, 4])})
    assert facts["host.contention.other_runnable_per_cpu"] == 1.0  # (4 - 2) / 2
    assert "host.contention.job_processes" not in facts


# ------------------------------------------------------------------ end to end

SCRIPT = Path(__file__).parent / "scripts" / "jobtree_train.py"


def _outside_now(seconds: float = 2.0) -> float:
    """Runnable tasks per CPU not of this test process, sampled for a while before a job starts."""
    vals = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with open("/proc/loadavg") as fh:
            vals.append(int(fh.read().split()[3].split("/")[0]) - 1)
        time.sleep(0.05)
    return sum(vals) / len(vals) / (os.cpu_count() or 1)


def _run(tmp_path, *args) -> dict:
    from ddpdoctor.bundle.settings import load_bundle_facts

    out = tmp_path / "bundle"
    env = project_env()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--out",
            str(out),
            "--no-analyze",
            "--warmup",
            "5",
            "--active",
            "40",
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(SCRIPT),
            "120",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return out, load_bundle_facts([str(out)])


def _im004_fires(facts: dict) -> bool:
    from ddpdoctor.rules_engine.engine import evaluate
    from ddpdoctor.rules_engine.registry import load_rules

    rules = load_rules()
    rule = next(r for r in rules.rules.values() if r.name == "imbalance.host_contention")
    return evaluate(rule, facts, rules.params.get(rule.id), None).finding is not None


@pytest.mark.live
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the job tree is read from /proc (Linux)")
def test_e2e_the_jobs_own_grandchild_is_not_contention(tmp_path):
    pytest.importorskip("torch")
    before = _outside_now()
    out, facts = _run(tmp_path, "grandchild")
    # torchrun's agent, two ranks, the helper and its spinning grandchild, and the run process itself
    assert facts["host.contention.job_processes"] >= 5
    job = json.loads((out / "ranks" / "rank0" / "settings.json").read_text())["evidence"]["contention"]["job"]
    assert job["root"] == "ddpdoctor run"
    # the spinning grandchild is the job's at every reading (runnable, running or not, whatever else runs)
    assert min(job["runnable_samples"]) >= 1 and len(job["runnable_samples"]) == len(job["outside_runnable_samples"])
    assert job["cpu_s"] > 0
    rank1 = json.loads((out / "ranks" / "rank1" / "settings.json").read_text())["evidence"]["contention"]
    assert "job" not in rank1  # one rank per host measures the tree
    if before > 0.25:
        pytest.skip(
            f"the host was busy before the job: {before:.2f} runnable tasks per CPU from other processes, "
            "so contention from outside is measured rightly; the quiet case needs an idle host"
        )
    # the grandchild spins on one of the 2 CPUs (the old per-rank count missed it: 0.5 per CPU outside)
    assert facts["host.contention.load_per_cpu"] >= 1.0, facts["host.contention.load_per_cpu"]
    assert facts["host.contention.other_runnable_per_cpu"] < 0.25, facts["host.contention.other_runnable_per_cpu"]
    assert not _im004_fires(facts)


@pytest.fixture
def cpu_burners():
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.live
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the job tree is read from /proc (Linux)")
def test_e2e_burners_outside_the_job_are_contention(tmp_path, cpu_burners):
    pytest.importorskip("torch")
    _, facts = _run(tmp_path)
    assert all(p.poll() is None for p in cpu_burners)
    n = os.cpu_count() or 2
    # one burner per CPU ran outside the job the whole time: about 1 runnable per CPU outside it
    assert facts["host.contention.other_runnable_per_cpu"] >= 0.5, facts["host.contention.other_runnable_per_cpu"]
    assert facts["host.contention.other_busy_share"] >= 0.2 or n > 8
    assert _im004_fires(facts)
