"""Live failure cases (issue #11), each a real `ddpdoctor run -- torchrun` of 2 CPU ranks on gloo:

- GLOO_SOCKET_IFNAME names an interface that does not exist: every rank fails alike at init -> shared
  configuration (NET005), the fix names an interface the bundle's host record lists;
- rank 0 runs a long evaluation while rank 1 times out in its next all-reduce (5 s process-group timeout):
  the stack dumps say rank 0 was busy in evaluate() at file:line for N s (FL014);
- an argparse usage error (exit 2) on both ranks, sys.exit(3) on both ranks, and a SIGKILL on rank 1:
  each a failed run with a finding.
The runs start together once per module; the time-sensitive evaluation run goes alone after them."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from subprocesses import project_env

from ddpdoctor.diagnosis import run_analyze
from ddpdoctor.logs import analyze_logs

pytestmark = pytest.mark.live  # every test here launches a job (the fast tier: -m "not live and not slow")

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).parent / "scripts" / "live_failure_cases.py"
TORCHRUN = [
    sys.executable,
    "-m",
    "torch.distributed.run",
    "--nproc_per_node=2",
    "--rdzv-endpoint=localhost:0",
    "--rdzv-backend=c10d",
    str(SCRIPT),
]
CASES = {
    "ifname": (["--mode", "plain"], {"GLOO_SOCKET_IFNAME": "eth9"}),
    "usage": ([], {}),
    "exit3": (["--mode", "exit3"], {}),
    "sigkill": (["--mode", "sigkill"], {}),
    "sigkill_all": (["--mode", "sigkill_all"], {}),
}


def _start(out: Path, args, env_extra):
    env = project_env()
    env.update(env_extra)
    return subprocess.Popen(
        [sys.executable, "-m", "ddpdoctor", "run", "--out", str(out), "--no-analyze", "--", *TORCHRUN, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("live")
    procs = {name: _start(root / name, args, env) for name, (args, env) in CASES.items()}
    for name, p in procs.items():
        out, _ = p.communicate(timeout=240)
        assert p.returncode != 0, f"{name}: the job was meant to fail\n{out.decode()[-2000:]}"
    p = _start(root / "evaluate", ["--mode", "evaluate"], {})
    out, _ = p.communicate(timeout=240)
    assert p.returncode != 0, out.decode()[-2000:]
    return {name: root / name for name in [*CASES, "evaluate"]}


def _first(folder):
    rep = run_analyze([str(folder)])
    assert rep.facts["run.status"] == "failed" and rep.diagnosis.verdict.failed is True
    assert rep.diagnosis.findings, "a failed run must have a finding"
    return rep, rep.diagnosis.findings[0]


def test_missing_gloo_interface_is_shared_configuration_with_a_real_interface(runs):
    host = json.loads(next((runs["ifname"] / "hosts").glob("*.json")).read_text())
    usable = {
        i["name"]
        for i in host["interfaces"]
        if i["name"] != "lo"
        and i.get("up")
        and any(re.match(r"\d+\.\d+\.\d+\.\d+/", a) for a in i.get("addresses", []))
    }
    if not usable:
        pytest.skip("this machine has no non-loopback interface with an IPv4 address to suggest")
    rep, first = _first(runs["ifname"])
    f = rep.facts
    assert f["failure.root_cause.kind"] == "network" and f["failure.root_cause.rank"] is None
    assert f["failure.network.shared"] is True and f["failure.network.ranks"] == [0, 1]
    assert f["failure.network.ifname"] == "eth9" and f["failure.network.suggested_ifname"] in usable
    assert first.rule == "NET005" and first.ranks == [0, 1]
    assert "Every rank (0, 1) failed alike" in first.summary and "eth9" in first.summary
    fix = first.fixes[0]
    assert fix.knob == "env.GLOO_SOCKET_IFNAME" and fix.value == f["failure.network.suggested_ifname"]
    assert f"export GLOO_SOCKET_IFNAME={fix.value}" in fix.title
    print("LIVE ifname:", first.summary)


def test_busy_rank_named_with_its_function_line_and_duration(runs):
    rep, first = _first(runs["evaluate"])
    f = rep.facts
    assert f["failure.root_cause.kind"] == "busy" and f["failure.root_cause.rank"] == 0
    assert f["failure.hang.busy_function"] == "evaluate"
    src = SCRIPT.read_text().splitlines()
    where = f["failure.hang.busy_where"]
    file, line = where.rsplit(":", 1)
    assert (
        file == SCRIPT.name
        and src[int(line) - 1].startswith(" ")
        and int(line) > src.index("def evaluate(model) -> float:")
    )
    assert f["failure.hang.busy_seconds"] >= 3.0  # at least the dump threshold (it ran ~5 s)
    assert f["failure.hang.waiting_ranks"] == [1] and "backward" in f["failure.hang.waiting_op"]
    assert first.rule == "FL014" and first.ranks == [0]
    assert re.search(
        r"Rank 0 was in `evaluate\(\)` at live_failure_cases.py:\d+ for \d+(\.\d)? s while rank 1 waited", first.summary
    )
    print("LIVE evaluate:", first.summary)


def test_usage_error_on_every_rank_is_a_failed_run(runs):
    rep, first = _first(runs["usage"])
    f = rep.facts
    assert f["failure.root_cause.kind"] == "exit" and f["failure.exit.shared"] is True
    assert f["failure.exit.usage"] == "the following arguments are required: --mode"
    assert first.rule == "FL013" and "usage error" in first.summary and "(exit code 2)" in first.summary
    assert rep.diagnosis.verdict.failed is True
    res = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "analyze", str(runs["usage"])],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert "the run failed" in res.stdout and "FL013" in res.stdout
    print("LIVE usage:", first.summary)


def test_plain_nonzero_exit_is_a_failed_run(runs):
    rep, first = _first(runs["exit3"])
    assert rep.facts["failure.root_cause.kind"] == "exit" and rep.facts["failure.exit.codes"] == {"0": 3, "1": 3}
    assert first.rule == "FL013" and "exited with code 3" in first.summary
    print("LIVE exit3:", first.summary)


def test_sigkill_is_a_failed_run(runs):
    rep, first = _first(runs["sigkill"])
    assert rep.facts["failure.root_cause.kind"] == "killed" and rep.facts["failure.root_cause.rank"] == 1
    assert first.rule == "FL008" and "SIGKILL" in first.summary
    print("LIVE sigkill:", first.summary)


def test_sigkill_on_every_rank_is_a_stop_from_outside(runs):
    """Issue 41 item 10: SIGKILL reaching every rank at once (a scheduler's kill -9) is said to come from outside,
    not as rank 0's death that rank 1 followed, nor as a host OOM no log names."""
    rep, first = _first(runs["sigkill_all"])
    assert rep.facts["failure.root_cause.kind"] == "killed" and rep.facts["failure.killed.every_rank"] is True
    assert first.rule == "FL024" and "Every rank (0, 1) was killed by SIGKILL at the same time" in first.summary
    assert "FL008" not in {f.rule for f in rep.diagnosis.findings}
    assert first.fixes[0].title.startswith("Find who stopped the job"), first.fixes[0].title
    print("LIVE sigkill_all:", first.summary)


def test_every_root_cause_kind_has_a_rule():
    """No failure is lost: each kind the log engine can produce is the `when` of some rule."""
    from ddpdoctor.logs import causal
    from ddpdoctor.rules_engine.registry import build_ruleset

    kinds = causal.root_cause_kinds()
    # every kind literal the evidence functions return is one the table declares
    emitted = set(
        re.findall(
            r'(?:_one\(|else \(\s*|return \(?|None if \S+ is None else \(\s*)"(\w+)", ',
            Path(causal.__file__).read_text(),
        )
    )
    assert len(emitted) >= 10 and emitted <= kinds, emitted - kinds
    kinds |= {"busy"}  # logs/hang.py
    whens = " ".join(getattr(r.when, "source", str(r.when)) for r in build_ruleset().active())
    assert kinds >= {
        "oom",
        "killed",
        "crash",
        "network",
        "rendezvous",
        "exit",
        "exception",
        "mismatch",
        "stopped",
        "seq_behind",
        "flight_recorder",
        "timeout",
        "remote_error",
    }
    missing = [k for k in sorted(kinds) if f"'{k}'" not in whens and f"failure.{k}.present" not in whens]
    assert not missing, f"root-cause kinds without a rule: {missing}"


def test_no_step_in_logs_only_folder_is_still_read(tmp_path):
    """A logs-only folder with two ranks' usage errors (no bundle) is a failed run too."""
    for r in (0, 1):
        (tmp_path / f"rank{r}.log").write_text(
            "usage: train.py [-h] --mode MODE\ntrain.py: error: the following arguments are required: --mode\n"
        )
    f = analyze_logs([str(tmp_path)]).facts
    assert f["failure.root_cause.kind"] == "exit" and f["failure.exit.shared"] is True


def test_a_failed_command_without_any_log_line_is_still_a_failed_run(tmp_path):
    """`ddpdoctor run -- sh -c 'exit 3'`: no rank ever starts, nothing names a cause; the run still reads failed."""
    out = tmp_path / "bundle"
    p = subprocess.run(
        [sys.executable, "-m", "ddpdoctor", "run", "--out", str(out), "--no-analyze", "--", "sh", "-c", "exit 3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 3
    rep = run_analyze([str(out)])
    assert rep.diagnosis.verdict.failed is True
    first = rep.diagnosis.findings[0]
    assert first.rule == "FL015" and "exit code 3" in first.summary
