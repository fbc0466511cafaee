"""A script that never started (issue 27): python could not open it, compile it, or import what it
needs.  The card names the interpreter's own message and the user's file:line (FL016), not 'exited
with code 2 … search the script for sys.exit(' nor 'Fix the ModuleNotFoundError on rank (unknown)'."""

import json
from pathlib import Path

from ddpdoctor.analysis import AnalyzeOptions
from ddpdoctor.diagnosis import run_analyze
from ddpdoctor.logs.analyze import analyze_logs

TORCHRUN_FAILED = """\
E1125 15:21:04.017000 8251 site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 0 (pid: 8304) of binary: /venv/bin/python
"""


def _bundle(tmp_path: Path, outputs: dict[int, str], events: dict[int, list[dict]] | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "launcher.log").write_text(TORCHRUN_FAILED)
    for r, text in outputs.items():
        d = tmp_path / "ranks" / f"rank{r}"
        d.mkdir(parents=True)
        (d / "output.log").write_text(text)
        evs = (events or {}).get(r, [])
        (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs))
    return tmp_path


def _facts(path):
    a = analyze_logs([str(path)])
    return {k: v for k, v in a.facts.items() if k.startswith(("failure.startup", "failure.root_cause"))}


def test_a_plain_python_command_with_a_misspelt_script_leads_with_it(tmp_path):
    """`ddpdoctor run -- python slow_rnak.py`: one rank, no torchrun line at all."""
    d = tmp_path / "ranks" / "rank0"
    d.mkdir(parents=True)
    (d / "output.log").write_text("python: can't open file '/x/slow_rnak.py': [Errno 2] No such file or directory\n")
    (tmp_path / "manifest.json").write_text('{"schema": "ddpdoctor.manifest/1", "status": "failed", "exit_code": 2}')
    rep = run_analyze([str(tmp_path)], AnalyzeOptions(jobs=1, hta="off"))
    assert [f.rule for f in rep.diagnosis.findings][:1] == ["FL016"]
    assert "FL015" not in [f.rule for f in rep.diagnosis.findings]


def test_a_misspelt_script_is_named_with_pythons_message_and_the_close_name(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "slow_rank.py").write_text("print()\n")
    missing = tmp_path / "code" / "slow_rnak.py"
    line = f"/venv/bin/python3.11: can't open file '{missing}': [Errno 2] No such file or directory\n"
    f = _facts(_bundle(tmp_path / "b", {0: line, 1: line}))
    assert f["failure.root_cause.kind"] == "startup" and f["failure.root_cause.rank"] is None
    assert analyze_logs([str(tmp_path / "b")]).facts["failure.present"] is True  # FL015 stays quiet
    assert f["failure.startup.kind"] == "missing_script" and f["failure.startup.shared"] is True
    assert (
        f["failure.startup.message"] == f"python3.11: can't open file '{missing}': [Errno 2] No such file or directory"
    )
    assert f["failure.startup.suggestion"] == str(tmp_path / "code" / "slow_rank.py")


def _exc(rank, etype, message, traceback, step=0):
    return [
        {"time": 100.0 + rank, "rank": rank, "kind": "start"},
        {
            "time": 100.1 + rank,
            "rank": rank,
            "kind": "exception",
            "step": step,
            "type": f"builtins.{etype}",
            "message": message,
            "uncaught": True,
            "traceback": traceback,
        },
        {"time": 100.2 + rank, "rank": rank, "kind": "exit", "code": 1, "steps_completed": step},
    ]


IMPORT_TB = (
    'Traceback (most recent call last):\n  File "/home/me/job/train.py", line 3, in <module>\n'
    '    import torchvisionx\n  File "<frozen importlib._bootstrap>", line 1176, in _find_and_load\n'
    "ModuleNotFoundError: No module named 'torchvisionx'\n"
)


def test_an_import_error_names_the_users_file_and_line_not_the_import_machinery(tmp_path):
    ev = {r: _exc(r, "ModuleNotFoundError", "No module named 'torchvisionx'", IMPORT_TB) for r in (0, 1)}
    f = _facts(_bundle(tmp_path, {0: "", 1: ""}, ev))
    assert f["failure.startup.kind"] == "import" and f["failure.startup.where"] == "/home/me/job/train.py:3"
    assert f["failure.startup.code"] == "import torchvisionx"
    assert f["failure.startup.message"] == "ModuleNotFoundError: No module named 'torchvisionx'"


def test_a_syntax_error_in_a_plain_log_is_found_from_its_traceback_lines(tmp_path):
    log = (
        '[rank0]:   File "/home/me/job/train.py", line 2\n[rank0]:     def f(:\n[rank0]:           ^\n'
        "[rank0]: SyntaxError: invalid syntax\n"
    )
    (tmp_path / "job.log").write_text(log)
    f = _facts(tmp_path)
    assert f["failure.startup.kind"] == "syntax" and f["failure.startup.where"] == "/home/me/job/train.py:2"
    assert f["failure.startup.code"] == "def f(:" and f["failure.root_cause.kind"] == "startup"


def test_an_import_error_after_training_started_is_not_a_startup_failure(tmp_path):
    ev = {0: _exc(0, "ImportError", "cannot import name 'x'", IMPORT_TB, step=12)}
    f = _facts(_bundle(tmp_path, {0: ""}, ev))
    assert f["failure.startup.present"] is False and f["failure.root_cause.kind"] != "startup"


def test_the_card_leads_with_the_startup_failure(tmp_path):
    ev = {r: _exc(r, "ModuleNotFoundError", "No module named 'torchvisionx'", IMPORT_TB) for r in (0, 1)}
    rep = run_analyze([str(_bundle(tmp_path, {0: "", 1: ""}, ev))], AnalyzeOptions(jobs=1, hta="off"))
    first = rep.diagnosis.findings[0]
    assert first.rule == "FL016" and "/home/me/job/train.py:3" in first.summary
    text = first.summary + " ".join(f.title + f.change for f in first.fixes)
    assert "(unknown)" not in text and "sys.exit" not in text and "rank None" not in text
