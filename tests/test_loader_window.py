"""The DataLoader's window (issue #25 part 3): capture/agent/loader.py measures the wait inside next(loader)
and the workers' CPU time; bundle/loader.py turns it into loader.* facts (waiting or computing, and the
workers a waiting loader needs)."""

import os
import time

import pytest

from ddpdoctor.bundle.loader import loader_facts, rank_loader
from ddpdoctor.capture.agent import loader as agent_loader
from ddpdoctor.resources import metric_params

PARAMS = metric_params()["evidence"]


def _win(**kw):
    rec = {
        "schema": 1,
        "wall_s": 1.0,
        "batches": 10,
        "next_wall_s": 0.6,
        "next_cpu_s": 0.01,
        "num_workers": 2,
        "workers_seen": 2,
        "workers_cpu_s": 0.08,
    }
    rec.update(kw)
    return rec


def test_workers_that_wait_need_latency_over_compute_workers():
    x = rank_loader(_win())
    # 2 workers kept busy over 1 s deliver 10 batches: 200 ms per batch; compute (1 - 0.6) / 10 = 40 ms per batch
    assert x["batch_latency_ms"] == 200.0 and x["compute_ms_per_batch"] == 40.0
    assert x["workers_needed"] == 5 and x["cpu_share"] == 0.04


def test_workers_that_compute_have_a_high_cpu_share():
    assert rank_loader(_win(workers_cpu_s=1.9))["cpu_share"] == 0.95


def test_single_process_loading_is_measured_inside_next():
    x = rank_loader(_win(num_workers=0, workers_cpu_s=None, next_wall_s=0.8, next_cpu_s=0.72))
    assert x["batch_latency_ms"] == 80.0 and x["compute_ms_per_batch"] == 20.0
    assert x["workers_needed"] == 4 and x["cpu_share"] == 0.9


@pytest.mark.parametrize(
    "bad",
    [None, {}, _win(batches=1), _win(wall_s=0), _win(num_workers=None), _win(num_workers=True), _win(next_wall_s="x")],
)
def test_unmeasured_windows_give_nothing(bad):
    assert rank_loader(bad) is None
    assert loader_facts({0: {"loader_window": bad}}, PARAMS) == {}


def test_facts_take_the_busiest_cpu_share_and_one_ranks_arithmetic():
    f = loader_facts(
        {
            0: {"loader_window": _win(next_wall_s=0.8, workers_cpu_s=0.02)},
            1: {"loader_window": _win(next_wall_s=0.5, workers_cpu_s=0.3)},
        },
        PARAMS,
    )
    assert f["loader.cpu_share"] == 0.15 and f["loader.cpu_share.per_rank"] == {0: 0.01, 1: 0.15}
    # rank 0 needs most workers: 200 ms latency over 20 ms compute
    assert (f["loader.workers_needed"], f["loader.batch_latency_ms"], f["loader.compute_ms_per_batch"]) == (
        10,
        200.0,
        20.0,
    )
    assert f["loader.workers_needed.per_rank"] == {0: 10, 1: 4}


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc/<pid>/stat (Linux)")
def test_timing_counts_the_wait_and_a_busy_workers_cpu():
    """A real child process that burns CPU stands for a worker; the training thread waits in next()."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    proc = ctx.Process(target=_burn, args=(0.4,))
    proc.start()

    class It:  # what the hook sees of a _MultiProcessingDataLoaderIter
        _workers = [proc]

    it = It()
    t = agent_loader.LoaderTiming()
    t.iterator_created(it)
    t.window_start()
    for _ in range(4):
        t.entered()
        time.sleep(0.02)  # waiting for a batch: no CPU
        t.returned()
    proc.join()
    t.window_stop(1)
    rec = t.record()
    assert rec["batches"] == 4 and 0.07 <= rec["next_wall_s"] < 0.5 and rec["next_cpu_s"] < 0.03
    assert rec["workers_cpu_s"] >= 0.2, rec  # the worker's CPU, counted after it was reaped
    assert rec["workers_seen"] == 1


def test_next_calls_outside_the_window_or_from_other_threads_are_not_counted():
    t = agent_loader.LoaderTiming()
    t.entered()
    t.returned()
    t.window_start()
    import threading

    th = threading.Thread(target=lambda: (t.entered(), t.returned()))
    th.start()
    th.join()
    t.window_stop(0)
    assert t.record()["batches"] == 0 and t.record()["workers_cpu_s"] is None


def _burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_time_without_a_cpu_on_a_contended_host_is_not_waiting():
    """A CPU-bound loader beside other processes: CPU time is low against the wall time, but the rest was
    spent runnable with no CPU (schedstat's run delay), not waiting on storage."""
    busy = rank_loader(_win(num_workers=0, workers_cpu_s=None, next_wall_s=0.8, next_cpu_s=0.1, next_runqueue_s=0.68))
    assert busy["cpu_share"] == 0.8333
    assert rank_loader(_win(num_workers=0, workers_cpu_s=None, next_wall_s=0.8, next_cpu_s=0.1))["cpu_share"] == 0.125
    workers = rank_loader(_win(workers_cpu_s=0.3, workers_runqueue_s=1.6))
    assert workers["cpu_share"] == 0.75  # 0.3 s of CPU in the 0.4 s the two workers could run


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="schedstat (Linux)")
def test_schedstat_reads_this_thread():
    cpu, queue = agent_loader.schedstat("/proc/thread-self/schedstat")
    assert cpu > 0 and queue >= 0
    assert agent_loader.pid_runqueue_s(os.getpid()) >= 0
    assert agent_loader.schedstat("/proc/no-such/schedstat") is None


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="schedstat (Linux)")
def test_the_training_threads_run_queue_wait_is_read_on_the_thread_that_opened_the_window():
    import threading

    t = agent_loader.LoaderTiming()
    t.window_start()
    _burn(0.05)
    t.window_stop(0)
    assert t.record()["train_runqueue_s"] >= 0  # this thread's own run-queue wait over the window
    t.window_start()
    th = threading.Thread(target=t.window_stop, args=(0,))  # stopped elsewhere (e.g. at exit): not this thread's
    th.start()
    th.join()
    assert t.record()["train_runqueue_s"] is None
