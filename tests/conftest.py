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


@pytest.fixture(scope="session")
def sample_document():
    """``sample_document(name)``: the ddpdoctor.Document of sample_traces/NAME, analyzed once per session as
    `ddpdoctor analyze NAME --hta off` analyzes it (the same pipeline, api.diagnose, in this process).  Shared by
    the tests that read a sample's diagnosis (tests/test_document.py, tests/test_render_roundtrip.py); read it,
    never change it (``to_dict()`` gives a copy)."""
    import ddpdoctor

    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = ddpdoctor.analyze(Path(__file__).resolve().parents[1] / "sample_traces" / name, hta="off")
        return cache[name]

    return get


# ------------------------------------------------------------------ the `live` marker's guard
# A test that launches a job (live_guard.job_launched) must be marked `live`: the fast tier is
# `pytest -m "not live and not slow"`.  Every process a test starts goes through subprocess.Popen; the item being
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


# ------------------------------------------------------------------ the `slow` marker's guard
# A test of the fast tier (neither `live` nor `slow`) whose call takes more than this much CPU (this process and
# the processes it waited for: os.times(), which a loaded host does not inflate as it does wall time) fails,
# naming the marker: the whole-corpus sweeps are `slow` and keep a representative case in the fast tier.
FAST_TEST_CPU_SECONDS = 30.0


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def over_cpu_budget(item, used: float) -> str | None:
    """Why a test that used ``used`` s of CPU fails the fast tier's budget, or None."""
    if item.get_closest_marker("live") or item.get_closest_marker("slow") or used <= FAST_TEST_CPU_SECONDS:
        return None
    return (
        f"{item.nodeid} took {used:.0f} s of CPU, over the fast tier's {FAST_TEST_CPU_SECONDS:.0f} s: mark it "
        "@pytest.mark.slow and keep a representative small case unmarked"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    start = _cpu_seconds()
    result = yield
    why = over_cpu_budget(item, _cpu_seconds() - start)
    if why:
        pytest.fail(why, pytrace=False)
    return result
