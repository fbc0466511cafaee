import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from live_guard import job_launched  # tests/ is put on sys.path just above

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "real_traces"


@pytest.fixture(scope="session")
def real_traces() -> Path:
    root = Path(os.environ.get("DDPDOCTOR_REAL_TRACES", REAL))
    if not root.is_dir():
        pytest.skip(
            f"real traces not found at {root} (the shared/ folder sits beside the project in "
            f"development and CI; set DDPDOCTOR_REAL_TRACES to point elsewhere)"
        )
    return root


# ------------------------------------------------------------------ the `live` marker's guard
# A test that launches a job (live_guard.job_launched) must be marked `live`: the fast tier is
# `pytest -m "not live"`.  Every process a test starts goes through subprocess.Popen; the item being
# run (its fixtures included) is known from pytest_runtest_protocol.
_running: dict[str, pytest.Item | None] = {"item": None}
_popen_init = subprocess.Popen.__init__


def _guarded_popen_init(self, args, *a, **kw):
    item = _running["item"]
    if item is not None and item.get_closest_marker("live") is None:
        job = job_launched(args)
        if job is not None:
            self._child_created = False  # nothing started: Popen.__del__ has nothing to reap
            pytest.fail(
                f"{item.nodeid} launches a job ({job}) without the `live` marker: mark it "
                "@pytest.mark.live (or `pytestmark = pytest.mark.live` for the module)",
                pytrace=False,
            )
    _popen_init(self, args, *a, **kw)


subprocess.Popen.__init__ = _guarded_popen_init


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running["item"] = item
    try:
        return (yield)
    finally:
        _running["item"] = None
