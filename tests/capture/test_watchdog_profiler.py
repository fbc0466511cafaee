"""The stuck-rank watchdog (agent_lifecycle.Ending) must not take the agent's own trace export for a
rank stuck in a collective (issue 27: under load, rank 1 was still exporting when rank 0 had finished,
the watchdog found torch/autograd/profiler.py on the stack and ended rank 1 without its trace)."""

import threading

from ddpdoctor.capture.agent import core as agent

Ending = agent._lifecycle.Ending


def _on_main_thread_inside(filename: str) -> bool:
    """main_in_collective() as seen from another thread while the main thread waits in code from ``filename``."""
    namespace: dict = {}
    exec(
        compile(
            "import time\ndef inside(done):\n    while not done.is_set():\n        time.sleep(0.005)\n",
            filename,
            "exec",
        ),
        namespace,
    )
    done, seen = threading.Event(), []

    def check():
        seen.append(Ending.main_in_collective())
        done.set()

    t = threading.Timer(0.05, check)
    t.start()
    namespace["inside"](done)
    t.join()
    return seen[0]


def test_a_collective_or_backward_on_the_main_thread_counts():
    assert _on_main_thread_inside("/venv/site-packages/torch/distributed/distributed_c10d.py") is True
    assert _on_main_thread_inside("/venv/site-packages/torch/autograd/__init__.py") is True


def test_the_profiler_stopping_or_exporting_is_not_a_collective():
    assert _on_main_thread_inside("/venv/site-packages/torch/autograd/profiler.py") is False
    assert _on_main_thread_inside("/venv/site-packages/torch/profiler/profiler.py") is False


def test_the_scripts_own_code_is_not_a_collective():
    assert _on_main_thread_inside("/home/me/train.py") is False


def test_the_window_profiler_says_when_it_exports(tmp_path):
    a = agent.Agent({"DDPDOCTOR_BUNDLE": str(tmp_path), "RANK": "1", "WORLD_SIZE": "2"})
    (tmp_path / "ranks" / "rank1").mkdir(parents=True)
    seen = []

    class Prof:
        def stop(self):
            seen.append(a.profiler.exporting)

        def export_chrome_trace(self, path):
            seen.append(a.profiler.exporting)
            with open(path, "w") as fh:
                fh.write("{}")

    a.profiler.prof = Prof()
    assert a.profiler.exporting is False
    a.profiler.stop(complete=True)
    assert seen == [True, True] and a.profiler.exporting is False
    assert (tmp_path / "ranks" / "rank1" / "rank1.pt.trace.json.gz").is_file()
