"""`ddpdoctor run` end to end: real torchrun, 2 CPU ranks, gloo, the bundled examples.

Each torchrun costs a few seconds of CPU, so every run is made once (module scope) and
shared by the assertions about it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from subprocesses import project_env

from ddpdoctor.analysis import AnalyzeOptions, analyze
from ddpdoctor.bundle.settings import load_bundle_facts
from ddpdoctor.capture.agent import contract
from ddpdoctor.capture.host.processes import _pids_of_run

pytest.importorskip("torch")
pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
ARGV_DUMP = Path(__file__).parent / "scripts" / "argv_dump.py"
TORCHRUN = [
    sys.executable,
    "-m",
    "torch.distributed.run",
    "--nproc_per_node=2",
    "--rdzv-endpoint=localhost:0",
    "--rdzv-backend=c10d",
]
WEIRD_ARGS = ["a b", '"quoted"', "it's", "--", "--out", "x", "--force", "$HOME", "*", ""]


def _env(**extra):
    return project_env(extra)


def ddpdoctor_run(out, command, options=("--no-analyze",), timeout=180, **env):
    return subprocess.run(
        # exactly --active steps unless a test asks for the window's minimum length (tests/capture/test_window_span.py)
        [sys.executable, "-m", "ddpdoctor", "run", "--out", str(out), "--min-window", "0", *options, "--", *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=_env(**env),
    )


class Captured:
    def __init__(self, out, res):
        self.out, self.res = Path(out), res
        self.manifest = json.loads((self.out / "manifest.json").read_text())

    def settings(self, r):
        return json.loads((self.out / "ranks" / f"rank{r}" / "settings.json").read_text())

    def events(self, r):
        return [
            json.loads(line) for line in (self.out / "ranks" / f"rank{r}" / "events.jsonl").read_text().splitlines()
        ]

    def analysis(self):
        return analyze([str(self.out)], AnalyzeOptions(jobs=1, hta="off"))


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    cache = {}

    def get(name, *args, options=("--no-analyze",)):
        key = (name, args, options)
        if key not in cache:
            out = tmp_path_factory.mktemp(name) / "bundle"
            res = ddpdoctor_run(out, [*TORCHRUN, str(EXAMPLES / f"{name}.py"), *args], options)
            cache[key] = Captured(out, res)
        return cache[key]

    return get


def assert_complete_bundle(c: Captured):
    assert c.res.returncode == 0, c.res.stderr[-3000:]
    m = c.manifest
    assert m["schema"] == "ddpdoctor.manifest/1" and m["status"] == "complete" and m["exit_code"] == 0
    assert m["world_size"] == 2 and m["ranks_present"] == [0, 1] and m["step_window"]["warmup"] == 5
    assert m["start_time"] and m["end_time"] and m["torch_version"]
    hosts = list((c.out / "hosts").glob("*.json"))
    assert len(hosts) == 1 and json.loads(hosts[0].read_text())["schema"] == "ddpdoctor.host/1"
    assert (c.out / "launcher.log").is_file() and (c.out / "flight_recorder").is_dir()
    for r in (0, 1):
        d = c.out / "ranks" / f"rank{r}"
        assert (d / f"rank{r}.pt.trace.json.gz").stat().st_size > 1000
        s = c.settings(r)
        assert s["schema"] == "ddpdoctor.settings/1" and s["rank"] == r and s["steps_completed"] == 10
        assert s["window"]["complete"] and s["window"]["recorded_steps"] == 5 and s["exit"]["code"] == 0
        assert s["ddp"]["used"] and s["ddp"]["param_count"] > 0 and s["dataloader"]["sampler"] == "DistributedSampler"
        kinds = [e["kind"] for e in c.events(r)]
        assert kinds[0] == "start" and kinds.count("step") == 10 and "trace" in kinds and kinds[-1] == "exit"
        # what a real rank wrote is what capture/agent/contract.py declares, and the recorder said nothing
        assert contract.undeclared_settings(s) == [] and set(kinds) <= set(contract.EVENT_KINDS)
        assert set(contract.SETTINGS_FIELDS) - set(s) <= set(contract.OPTIONAL_SETTINGS_FIELDS)
        assert not [e for e in s["agent_errors"] if "contract" in e["place"]]
    a = c.analysis()
    assert [s.rank for s in a.summaries] == [0, 1] and all(len(s.steps) == 5 for s in a.summaries)
    assert not [w for w in a.warnings if "skipped" in w]  # settings/host JSON are not mistaken for traces
    return a


def shares(a, col):
    return [a.rank_share(s)[col] for s in a.summaries]


def test_slow_loader_bundle_and_breakdown(example):
    c = example("slow_loader")
    a = assert_complete_bundle(c)
    assert min(shares(a, "dataloader_wait")) > 0.5
    s = c.settings(0)
    assert s["dataloader"]["num_workers"] == 0 and s["dataloader"]["set_epoch_called"] is True
    assert s["dataloader"]["batch_size"] == 16 and s["dataloader"]["drop_last"] is True
    assert s["dataloader"]["dataset_len"] == 4096 and s["dataloader"]["prefetch_factor"] is None
    assert s["dataloader"]["batches_per_epoch"] == 4096 // 2 // 16  # len(loader): the sampler's half
    assert s["optimizer"]["type"] == "SGD" and s["precision"]["mixed_precision"] == "none"
    assert s["distributed"]["backend"] == "gloo" and s["ddp"]["bucket_cap_mb"] == 25.0
    f = load_bundle_facts([str(c.out)])
    assert f["config.dataloader.num_workers"] == 0 and f["config.optimizer"] == "SGD" and f["run.status"] == "complete"
    assert f["config.dataloader.batches_per_epoch"] == 128 and f["config.dataloader.iterations"] == 1
    assert f["host.local_world_size"] == 2 and f["run.steps_completed.per_rank"] == {0: 10, 1: 10}
    assert f["config.ddp.num_buckets"] >= 1 and f["config.ddp.used"] is True
    # NCCL_DEBUG_FILE points into the rank's folder; the process ran with the injected agent only
    assert c.manifest["env_set"]["NCCL_DEBUG"] == "INFO"


def test_heavy_compute_is_compute_bound(example):
    a = assert_complete_bundle(example("heavy_compute"))
    compute = sum(shares(a, "compute")) / 2
    assert compute > 0.4 and compute > sum(shares(a, "comm_exposed")) / 2
    assert max(shares(a, "dataloader_wait")) < 0.25


def test_comm_heavy_is_communication_bound(example):
    c = example("comm_heavy")
    a = assert_complete_bundle(c)
    assert min(shares(a, "comm")) > 0.2
    assert min(shares(a, "comm_exposed")) > max(shares(a, "dataloader_wait"))
    from ddpdoctor.analysis import AnalyzeOptions
    from ddpdoctor.diagnosis import AnalysisContext, run_analyze
    from ddpdoctor.rules_engine.registry import build_ruleset

    r = run_analyze(
        [str(c.out)], AnalyzeOptions(jobs=1, hta="off"), AnalysisContext.of(build_ruleset(use_config=False))
    )
    assert "CM001" in {f.rule for f in r.diagnosis.findings}  # the verdict may add machine noise on 2 CPUs
    assert c.settings(0)["ddp"]["grad_bytes"] > 40e6


def test_slow_rank_is_named_straggler_and_run_analyzes(example):
    c = example("slow_rank", options=())  # with the analysis printed by `run`
    a = assert_complete_bundle(c)
    assert [s.rank for s in a.cross.stragglers] == [1]
    # stopped after the window, every rank left the process group together at exit (no gloo teardown abort)
    for r in (0, 1):
        kinds = [e["kind"] for e in c.events(r)]
        assert kinds.index("stop") < kinds.index("left_process_group"), kinds
    # run ends with the card: the verdict names the late rank, and the Next: line comes last
    assert "Rank 1 is a straggler" in c.res.stdout and "\nNext: " in c.res.stdout
    assert c.res.stdout.rstrip().splitlines()[-1].startswith("      ")


def test_oom_rank_and_the_collective_error_it_causes(example):
    c = example("oom_skip_batch")
    assert c.res.returncode == 1 and c.manifest["status"] == "failed" and c.manifest["exit_code"] == 1
    ooms = [e for e in c.events(1) if e["kind"] == "oom"]
    assert len(ooms) == 1 and "CUDA out of memory" in ooms[0]["message"] and ooms[0]["step"] == 4
    assert not [e for e in c.events(0) if e["kind"] == "oom"]
    errs = [e for e in c.events(0) if e["kind"] == "exception"]
    assert errs and errs[0]["type"].endswith("RuntimeError") and errs[0]["time"] > ooms[0]["time"]
    assert c.settings(0)["exit"]["code"] == 1 and c.settings(1)["ooms"] == 1
    assert "OOM at step 4" in (c.out / "ranks" / "rank1" / "output.log").read_text()
    assert "Root Cause" in (c.out / "launcher.log").read_text()
    assert "rank 1: out of memory at step 4 (caught" in c.res.stderr  # run names the OOM rank first
    # traces of the cut-short window were flushed on both ranks
    assert all((c.out / "ranks" / f"rank{r}" / f"rank{r}.pt.trace.json.gz").is_file() for r in (0, 1))


@pytest.fixture(scope="module")
def argv_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("argv")
    res = ddpdoctor_run(tmp / "bundle", [*TORCHRUN, str(ARGV_DUMP), *WEIRD_ARGS], ARGV_DUMP_DIR=str(tmp))
    return tmp, res


def test_arguments_reach_every_rank_untouched(argv_run):
    tmp, res = argv_run
    assert res.returncode == 0, res.stderr[-2000:]
    for r in (0, 1):
        assert json.loads((tmp / f"argv{r}.json").read_text())["argv"] == WEIRD_ARGS
        log = (tmp / "bundle" / "ranks" / f"rank{r}" / "output.log").read_text()
        assert f"argv_dump rank {r}: {len(WEIRD_ARGS)} args" in log
        assert f"written straight to fd 2 by rank {r}" in log  # C-level writes to the fds are kept
    # rank output still reaches the terminal, and the launcher's log holds only the launcher's own lines
    assert "argv_dump rank 1" in res.stdout and "written straight to fd 2 by rank 0" in res.stderr
    assert "argv_dump rank" not in (tmp / "bundle" / "launcher.log").read_text()
    m = json.loads((tmp / "bundle" / "manifest.json").read_text())
    assert m["argv"][-len(WEIRD_ARGS) :] == WEIRD_ARGS
    # no trace (the script never trains): the bundle says so instead of claiming completeness
    assert m["status"] == "partial" and m["ranks_present"] == []


def test_plain_python_exit_code_propagates(tmp_path):
    res = ddpdoctor_run(
        tmp_path / "b", [sys.executable, str(ARGV_DUMP), "x y"], options=(), ARGV_DUMP_DIR=str(tmp_path), EXIT_CODE="3"
    )
    assert res.returncode == 3, res.stderr
    assert json.loads((tmp_path / "argv0.json").read_text())["argv"] == ["x y"]
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert m["status"] == "failed" and m["exit_code"] == 3
    events = [json.loads(x) for x in (tmp_path / "b" / "ranks" / "rank0" / "events.jsonl").read_text().splitlines()]
    assert events[-1]["kind"] == "exit" and events[-1]["code"] == 3
    # a failed run: one bundle line, then the card, which names the exit (issue 27: the card leads)
    card = res.stdout[res.stdout.index("Verdict: ") :]  # after the script's own output
    assert card.startswith("Verdict: the run failed") and "exited with code 3" in card, res.stdout
    assert res.stderr.count("ddpdoctor: ") == 1, res.stderr


def test_existing_out_is_refused_without_force(tmp_path):
    out = tmp_path / "b"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    res = ddpdoctor_run(out, [sys.executable, "-c", "pass"])
    assert res.returncode == 2 and "already exists" in res.stderr and "Traceback" not in res.stderr
    assert (out / "keep.txt").exists()


def test_sigterm_keeps_a_partial_bundle_and_leaves_no_orphans(tmp_path):
    out = tmp_path / "b"
    cmd = [
        sys.executable,
        "-m",
        "ddpdoctor",
        "run",
        "--out",
        str(out),
        "--no-analyze",
        "--warmup",
        "2",
        "--min-window",
        "0",  # the test sends SIGTERM once the 5-step window is over (a longer window may still be exporting)
        "--keep-going",
        "--",
        *TORCHRUN,
        str(EXAMPLES / "slow_rank.py"),
        "--steps",
        "100000",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            evs = [out / "ranks" / f"rank{r}" / "events.jsonl" for r in (0, 1)]
            if all(p.exists() and '"profiler_start"' in p.read_text() for p in evs):
                break
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.3)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]  # 128 + SIGTERM, as the README says
    m = json.loads((out / "manifest.json").read_text())
    assert m["interrupted_by"] == "SIGTERM" and "stopped by SIGTERM at step" in err
    assert m["status"] == ("complete" if m["windows_complete"] else "partial")
    assert _pids_of_run(m["run_id"]) == []  # no process of this run is left
    for r in (0, 1):
        assert (out / "ranks" / f"rank{r}" / f"rank{r}.pt.trace.json.gz").is_file()
        kinds = [json.loads(x)["kind"] for x in (out / "ranks" / f"rank{r}" / "events.jsonl").read_text().splitlines()]
        assert "signal" in kinds and kinds[-1] == "exit"


def test_dataloader_worker_processes_are_not_ranks(example):
    c = example("slow_loader", "--workers", "2")
    assert_complete_bundle(c)
    dl = c.settings(1)["dataloader"]
    assert dl["num_workers"] == 2 and dl["persistent_workers"] is True and dl["prefetch_factor"] == 2
    assert sorted(p.name for p in (c.out / "ranks").iterdir()) == ["rank0", "rank1"]
    for r in (0, 1):
        starts = [e for e in c.events(r) if e["kind"] == "start"]
        assert len(starts) == 1  # the workers did not activate the agent


def test_single_process_script_is_captured(tmp_path):
    res = ddpdoctor_run(
        tmp_path / "b",
        [sys.executable, str(Path(__file__).parent / "scripts" / "single_train.py")],
        options=("--no-analyze", "--warmup", "2", "--active", "3"),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    c = Captured(tmp_path / "b", res)
    assert c.manifest["status"] == "complete" and c.manifest["ranks_present"] == [0]
    s = c.settings(0)
    assert s["steps_completed"] == 5 and s["window"]["first_step"] == 2 and s["ddp"] == {"used": False}
    assert s["precision"]["mixed_precision"] == "bf16" and s["optimizer"]["type"] == "Adam"
    assert s["dataloader"]["sampler"] == "RandomSampler"
    assert "finished all" not in res.stdout  # stopped after the window
    assert "stopped after the recorded window" in res.stderr
    a = c.analysis()
    assert [len(x.steps) for x in a.summaries] == [3]


def test_two_nodes_give_two_bundles_analyzed_together(tmp_path):
    """Two `ddpdoctor run … torchrun --nnodes=2` on this host stand in for two nodes."""
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    procs = []
    for n in (0, 1):
        cmd = [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--out",
            str(tmp_path / f"node{n}"),
            "--no-analyze",
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc_per_node=1",
            f"--node_rank={n}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=localhost:{port}",
            str(EXAMPLES / "slow_rank.py"),
        ]
        procs.append(
            subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
        )
    for p in procs:
        _out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-2000:]
    ranks = set()
    for n in (0, 1):
        m = json.loads((tmp_path / f"node{n}" / "manifest.json").read_text())
        assert m["status"] == "complete" and m["world_size"] == 2 and m["nnodes"] == 2 and len(m["ranks_present"]) == 1
        ranks.update(m["ranks_present"])
    assert ranks == {0, 1}
    f = load_bundle_facts([str(tmp_path / "node0"), str(tmp_path / "node1")])
    assert f["run.status"] == "complete" and f["host.nnodes"] == 2 and f["run.ranks_present"] == [0, 1]
    assert f["host.local_world_size"] == 1
    a = analyze([str(tmp_path)], AnalyzeOptions(jobs=1, hta="off"))
    assert [s.rank for s in a.summaries] == [0, 1] and not a.warnings
    assert len(a.cross.stragglers) == 1  # rank 1 of the job sleeps (whichever node it landed on)


def test_sigterm_reaches_a_rank_blocked_in_a_collective(tmp_path):
    """Python runs signal handlers only between bytecodes; a rank blocked in C++ must still
    die on SIGTERM (within the watcher's 2 s) and leave its exit event and settings."""
    out = tmp_path / "b"
    cmd = [
        sys.executable,
        "-m",
        "ddpdoctor",
        "run",
        "--out",
        str(out),
        "--no-analyze",
        "--warmup",
        "3",
        "--active",
        "50",
        "--",
        *TORCHRUN,
        str(Path(__file__).parent / "scripts" / "blocked_rank.py"),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=_env())
    ev = out / "ranks" / "rank0" / "events.jsonl"
    try:
        deadline = time.time() + 120
        while not (ev.exists() and '"step": 6' in ev.read_text()):
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.2)
        time.sleep(1.5)  # rank 0 is now waiting for rank 1 in the all-reduce
        pid = json.loads(ev.read_text().splitlines()[0])["pid"]
        t0 = time.time()
        os.kill(pid, signal.SIGTERM)
        while Path(f"/proc/{pid}").exists() and ") Z" not in Path(f"/proc/{pid}/stat").read_text():
            assert time.time() - t0 < 15, "the blocked rank did not die on SIGTERM"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    events = [json.loads(x) for x in ev.read_text().splitlines()]
    sig = [e for e in events if e["kind"] == "signal"]
    assert sig and sig[0].get("handled_by", "").startswith("watcher")
    assert events[-1]["kind"] == "exit" and events[-1]["code"] == -signal.SIGTERM
    settings = json.loads((out / "ranks" / "rank0" / "settings.json").read_text())
    assert settings["ddp"]["used"] and settings["exit"]["code"] == -signal.SIGTERM
    assert json.loads((out / "manifest.json").read_text())["status"] == "partial"


def test_secrets_never_reach_the_bundle_and_sitecustomize_is_chained(tmp_path):
    secret = "hf_" + "Zq8RtY2uVw4XkL9mN3pB7cD5eF1gH6jJ"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text(
        "import os\nopen(os.path.join(os.environ['ARGV_DUMP_DIR'], f'site{os.getpid()}'), 'w').close()\n"
    )
    res = ddpdoctor_run(
        tmp_path / "b",
        [sys.executable, str(ARGV_DUMP), "--hf-token", secret, "--password=pw123"],
        ARGV_DUMP_DIR=str(tmp_path),
        HF_TOKEN=secret,
        MY_DB_URL="postgres://u:pw123@db/x",
        PYTHONPATH=f"{mine}{os.pathsep}{ROOT}",
    )
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "argv0.json").read_text())["argv"] == ["--hf-token", secret, "--password=pw123"]
    assert list(tmp_path.glob("site*")), "the user's own sitecustomize did not run"
    for f in (tmp_path / "b").rglob("*"):
        if f.is_file() and f.name != "output.log":  # output.log is what the script printed, raw
            text = f.read_text(errors="replace")
            assert secret not in text and "pw123" not in text, f
    host = json.loads(next((tmp_path / "b" / "hosts").glob("*.json")).read_text())
    assert host["env"]["HF_TOKEN"] == "<redacted>" and host["env"]["MY_DB_URL"] == "postgres://u:<redacted>@db/x"


def test_killing_ddpdoctor_itself_stops_the_training(tmp_path):
    """SIGKILL cannot be forwarded; the launcher's parent-death signal stops it and its ranks."""
    out = tmp_path / "b"
    cmd = [
        sys.executable,
        "-m",
        "ddpdoctor",
        "run",
        "--out",
        str(out),
        "--no-analyze",
        "--keep-going",
        "--",
        *TORCHRUN,
        str(EXAMPLES / "slow_rank.py"),
        "--steps",
        "100000",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=_env())
    ev = out / "ranks" / "rank1" / "events.jsonl"
    deadline = time.time() + 120
    while not (ev.exists() and '"step": 2' in ev.read_text()):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.2)
    run_id = json.loads((out / "manifest.json").read_text())["run_id"]
    proc.kill()
    proc.wait()
    deadline = time.time() + 45
    while _pids_of_run(run_id):
        assert time.time() < deadline, f"processes left: {_pids_of_run(run_id)}"
        time.sleep(0.3)
    assert json.loads((out / "manifest.json").read_text())["status"] == "partial"  # as written at the start
    # its private folder is left behind (nothing runs after SIGKILL); the next run removes it
    from ddpdoctor.capture.host.launcher import _remove_stale_private_dirs

    _remove_stale_private_dirs(min_age_s=0)
    import tempfile

    for d in Path(tempfile.gettempdir()).glob("ddpdoctor-run-*"):
        assert (d / "owner.pid").read_text() != str(proc.pid)
