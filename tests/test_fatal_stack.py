"""Where a rank was when it died of a signal, from faulthandler's stacks in its log (``ddpdoctor run`` enables
faulthandler in every rank): the crashed thread's innermost frame of the script's own code and the library call
it was in; the main thread's when the signal came from a thread with no Python frame. Logs built here, and one
real 2-rank gloo run whose rank 1 segfaults inside a function of the script."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.logs import analyze_logs
from ddpdoctor.logs.callsite import last_tracebacks
from ddpdoctor.logs.fatal_stack import crash_places

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "scripts" / "native_crash.py"

SEGV = """\
Fatal Python error: Segmentation fault

Thread 0x00007fd1f63536c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007fd22c5beb80 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "/home/u/train.py", line 18 in decode_record
  File "/home/u/train.py", line 33 in main
  File "/home/u/train.py", line 43 in <module>

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""

ABORT_FROM_NATIVE_THREAD = """\
terminate called after throwing an instance of 'gloo::EnforceNotMet'
Fatal Python error: Aborted

Current thread 0x00007f0000000001 (most recent call first):
  <no Python frame>

Thread 0x00007f0000000002 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2850 in all_reduce
  File "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81 in wrapper
  File "/home/u/train.py", line 41 in log_loss
  File "/home/u/train.py", line 60 in main
  File "/home/u/train.py", line 70 in <module>
"""


def _lines(text: str, rank: int) -> list:
    return [("rank.log", i, t, rank, None) for i, t in enumerate(text.splitlines(), 1)]


def test_the_crashed_threads_own_frame_and_its_library_call():
    p = crash_places(_lines(SEGV, 1))[1]
    assert (p["where"], p["call"], p["thread"]) == ("decode_record (train.py:18)", "ctypes.string_at", "crashed")


def test_a_native_threads_abort_names_where_the_main_thread_was():
    p = crash_places(_lines(ABORT_FROM_NATIVE_THREAD, 0))[0]
    assert p["where"] == "log_loss (train.py:41)" and p["thread"] == "main"
    assert p["call"] == "torch.distributed.distributed_c10d.all_reduce"


def test_a_dump_is_no_traceback_of_its_own():
    """faulthandler's frames (every thread, innermost first) are read as a dump, never as a traceback: a dump with
    no frame of the script's own code leaves the rank's earlier traceback as its last."""
    tb = 'Traceback (most recent call last):\n  File "/home/u/train.py", line 9, in main\n'
    only_libraries = (
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f0000000001 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 331 in wait\n'
    )
    assert last_tracebacks(_lines(tb + only_libraries, 0)) == {0: [("/home/u/train.py", 9, "main")]}
    got = last_tracebacks(_lines(tb + SEGV, 1))[1]
    assert got[0] == ("/home/u/train.py", 43, "<module>") and got[-1][2] == "string_at", got


def test_no_dump_no_place():
    assert crash_places(_lines('Traceback (most recent call last):\n  File "t.py", line 3, in main\n', 0)) == {}


def test_the_place_reaches_the_failure_facts(tmp_path):
    (tmp_path / "rank1.log").write_text("step 2 loss 1.0\n" + SEGV)
    (tmp_path / "launcher.log").write_text(
        "E1126 01:02:58.000000 1 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: -11) "
        "local_rank: 1 (pid: 42) of binary: /usr/bin/python3\n"
    )
    f = analyze_logs([str(tmp_path)]).facts
    assert f["failure.root_cause.rank"] == 1, (f["failure.root_cause.kind"], f["failure.root_cause.rank"])
    assert f["failure.crash.where"] == "decode_record (train.py:18)" and f["failure.crash.call"] == "ctypes.string_at"


@pytest.mark.live
def test_real_segfault_is_named_at_its_line(tmp_path):
    pytest.importorskip("torch")
    out, js = tmp_path / "b", tmp_path / "d.json"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddpdoctor",
            "run",
            "--min-window",
            "0",
            "--warmup",
            "1",
            "--active",
            "20",
            "--out",
            str(out),
            "--json",
            str(js),
            "--",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(JOB),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert res.returncode != 0, res.stderr[-2000:]
    doc = json.loads(js.read_text())
    top = doc["findings"][0]
    assert top["rule"] == "FL008" and top["ranks"] == [1], [(f["rule"], f["summary"][:150]) for f in doc["findings"]]
    assert "in ctypes.string_at called from decode_record (native_crash.py:" in top["summary"], top["summary"]
    assert top["fixes"][0]["title"].startswith("Look at what ctypes.string_at does"), top["fixes"][0]["title"]
