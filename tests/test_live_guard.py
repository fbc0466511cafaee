"""The `slow` marker's guard (a fast-tier test over its CPU budget fails) and the `live` marker's guard (tests/conftest.py, tests/live_guard.py): what counts as launching a job, and an
unmarked test that launches one fails before anything starts."""

import subprocess
import sys

import pytest
from live_guard import ROOT, job_launched


def test_what_launches_a_job():
    py = sys.executable
    assert job_launched([py, "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"]) == "torchrun"
    assert job_launched(["/usr/bin/torchrun", "--standalone", "t.py"]) == "torchrun"
    assert job_launched("torchrun --nproc_per_node=2 train.py") == "torchrun"  # a shell string
    assert job_launched([py, "-m", "ddpdoctor", "run", "--out", "b", "--", "x"]) == "ddpdoctor run"
    assert job_launched(["/venv/bin/ddpdoctor", "tune", "x"]) == "ddpdoctor tune"
    assert job_launched([py, str(ROOT / "examples" / "slow_rank.py")]).startswith("the training script")
    assert job_launched([py, str(ROOT / "tests" / "scripts" / "argv_dump.py")]).startswith("the training script")


def test_what_does_not():
    py = sys.executable
    assert job_launched([py, "-m", "ddpdoctor", "analyze", "sample_traces/x"]) is None
    assert job_launched([py, "-m", "ddpdoctor", "rules", "test"]) is None
    assert job_launched([py, "-c", "print('run')"]) is None
    assert job_launched(["bash", "-c", "echo run"]) is None


def test_an_unmarked_test_that_launches_a_job_fails_before_it_starts(tmp_path):
    flag = tmp_path / "started"
    script = ROOT / "tests" / "scripts" / "touch_flag.py"  # need not exist: nothing is run
    with pytest.raises(pytest.fail.Exception, match="without the `live` marker"):
        subprocess.run([sys.executable, "-m", "torch.distributed.run", str(script), str(flag)], timeout=60)
    assert not flag.exists()


@pytest.mark.live
def test_a_marked_test_may(tmp_path):
    res = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "scripts" / "argv_dump.py"), "x"],
        cwd=tmp_path,
        env={"ARGV_DUMP_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "argv_dump rank" in res.stdout, res.stderr


def test_a_fast_tier_test_over_its_cpu_budget_fails_and_a_slow_or_live_one_may(request):
    from conftest import FAST_TEST_CPU_SECONDS, over_cpu_budget

    item = request.node
    assert over_cpu_budget(item, FAST_TEST_CPU_SECONDS / 2) is None
    assert "mark it @pytest.mark.slow" in over_cpu_budget(item, FAST_TEST_CPU_SECONDS + 1)
    item.add_marker(pytest.mark.slow)
    assert over_cpu_budget(item, FAST_TEST_CPU_SECONDS + 1) is None
