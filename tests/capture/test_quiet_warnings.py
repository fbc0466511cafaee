"""Torch's warnings about a setting ddpdoctor chose (a `run --try` arm's override) go to the rank's log, not the
terminal; the same warning about the user's own value, and every other warning, still reach the terminal."""

from __future__ import annotations

import io
import warnings

from ddpdoctor.capture.agent import overrides, quiet

WORKERS = (
    "This DataLoader will create 8 worker processes in total. Our suggested max number of worker in current "
    "system is 2, which is smaller than what this DataLoader is going to create."
)


def _record(**applied) -> dict:
    rec = overrides.trial_record({k.replace("__", "."): v for k, v in applied.items()})
    rec["applied"].update({k.replace("__", "."): {"from": 0, "to": v} for k, v in applied.items()})
    return rec


def _warn_through(router, text, category=UserWarning) -> None:
    with warnings.catch_warnings():  # restores showwarning afterwards
        warnings.showwarning = router
        warnings.simplefilter("always")
        warnings.warn(text, category, stacklevel=1)


def test_warning_about_ddpdoctors_num_workers_goes_to_the_log_only(tmp_path):
    terminal = io.StringIO()
    log = tmp_path / "output.log"
    log.write_text("earlier output\n")
    router = quiet.WarningRouter(
        _record(dataloader__num_workers=8)["applied"],
        str(log),
        previous=lambda m, c, f, n, file=None, line=None: terminal.write(f"{c.__name__}: {m}\n"),
    )
    _warn_through(router, WORKERS)
    assert terminal.getvalue() == ""
    text = log.read_text()
    assert text.startswith("earlier output\n")  # appended, nothing lost
    assert "This DataLoader will create 8 worker processes" in text
    assert "dataloader.num_workers is the setting ddpdoctor tried" in text
    assert router.routed == 1


def test_users_own_value_and_other_warnings_reach_the_terminal(tmp_path):
    terminal = io.StringIO()
    log = tmp_path / "output.log"
    router = quiet.WarningRouter(
        _record(dataloader__num_workers=4)["applied"],  # ddpdoctor tried 4; the warning is about the user's 8
        str(log),
        previous=lambda m, c, f, n, file=None, line=None: terminal.write(f"{c.__name__}: {m}\n"),
    )
    _warn_through(router, WORKERS)
    _warn_through(router, "something else the user should see")
    _warn_through(router, WORKERS, DeprecationWarning)
    assert terminal.getvalue().count("UserWarning") == 2
    assert "This DataLoader will create 8" in terminal.getvalue()
    assert not log.exists()


def test_no_override_no_routing():
    assert quiet.chosen_by_ddpdoctor(WORKERS, UserWarning, {}) is None
    assert quiet.chosen_by_ddpdoctor(WORKERS, UserWarning, {"dataloader.num_workers": {"to": 8}}) == (
        "dataloader.num_workers"
    )


def test_log_that_cannot_be_written_falls_back_to_the_terminal(tmp_path):
    terminal = io.StringIO()
    router = quiet.WarningRouter(
        {"dataloader.num_workers": {"from": 0, "to": 8}},
        str(tmp_path / "missing-folder" / "output.log"),
        previous=lambda m, c, f, n, file=None, line=None: terminal.write(f"{c.__name__}: {m}\n"),
    )
    _warn_through(router, WORKERS)
    assert "This DataLoader will create 8" in terminal.getvalue()
