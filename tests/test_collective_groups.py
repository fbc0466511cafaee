"""Exposed communication split by which collectives it is (metrics/collective_groups.py)."""

import numpy as np
import pytest
from tracebuilder import TraceBuilder

from ddpdoctor.metrics import intervals as iv
from ddpdoctor.metrics.breakdown import summarize
from ddpdoctor.metrics.collective_groups import (
    BACKWARD_ALLREDUCE,
    FORWARD_BROADCAST,
    LOOP_SYNC,
    OTHER,
    exposed_by_group,
    forward_broadcast_messages,
    group_of,
    issue_times,
)
from ddpdoctor.trace.decode import load_rank_trace
from ddpdoctor.trace.messages import CollMessages, no_messages
from ddpdoctor.trace.model import Spans


def spans(*pairs, names=None):
    return Spans.build([a for a, _ in pairs], [b for _, b in pairs], names)


def test_group_follows_kind_and_where_the_call_was_issued():
    fwd, bwd = spans((0, 100)), spans((200, 300))
    kinds = ["broadcast", "all_reduce", "all_reduce", "broadcast", "reduce_scatter", "all_gather", "send_recv"]
    issued = np.array([10.0, 250.0, 350.0, 150.0, 299.0, 250.0, 50.0])
    assert group_of(kinds, issued, fwd, bwd) == [
        FORWARD_BROADCAST,  # DDP's buffer broadcast inside the forward
        BACKWARD_ALLREDUCE,  # a gradient bucket
        LOOP_SYNC,  # an all-reduce after backward (logging, a manual gradient loop)
        LOOP_SYNC,  # a broadcast between forward and backward
        BACKWARD_ALLREDUCE,
        OTHER,  # an all-gather, even in backward: sharded parallelism
        OTHER,  # pipeline send/recv, even in the forward
    ]


def test_no_forward_or_backward_spans_means_every_all_reduce_or_broadcast_is_the_loops():
    assert group_of(["broadcast", "all_reduce"], np.array([1.0, 2.0]), spans(), spans()) == [LOOP_SYNC, LOOP_SYNC]


def test_issue_times_pair_the_backend_records_with_the_calls_in_time_order():
    api = spans((5, 6), (1, 2), (9, 10))
    lib = np.array([30.0, 3.0, 12.0])  # out of order: the backend's threads
    assert issue_times(lib, api).tolist() == [9.0, 1.0, 5.0]
    # counts differ (some collectives issued from C++): each record stands for itself
    assert issue_times(lib, spans((1, 2))).tolist() == [30.0, 3.0, 12.0]


def test_exposed_time_per_group_counts_overlap_once_and_only_what_is_exposed():
    ws, we = np.array([0.0, 1000.0]), np.array([1000.0, 2000.0])
    start = np.array([100.0, 150.0, 600.0, 1100.0])
    end = np.array([400.0, 300.0, 700.0, 1200.0])
    groups = [FORWARD_BROADCAST, BACKWARD_ALLREDUCE, LOOP_SYNC, FORWARD_BROADCAST]
    exposed = iv.union(np.array([200.0, 650.0, 1100.0]), np.array([500.0, 1000.0, 1150.0]))
    out = exposed_by_group(start, end, groups, exposed, ws, we)
    # broadcast: 200-400 in step 0, 1100-1150 in step 1; the all-reduce's 200-300 is already counted
    assert out["exposed_forward_broadcast_us_per_step"] == pytest.approx((200 + 50) / 2)
    assert out["exposed_backward_allreduce_us_per_step"] == 0
    assert out["exposed_loop_sync_us_per_step"] == pytest.approx(50 / 2)  # 650-700
    assert out["exposed_other_collective_us_per_step"] == 0
    assert exposed_by_group(start, end, groups, exposed, np.empty(0), np.empty(0)) == {}


def test_forward_broadcast_bytes_come_only_from_sized_broadcast_records_in_the_forward():
    msgs = CollMessages(
        start=np.array([10.0, 20.0, 250.0, 1010.0]),
        nbytes=np.array([1000.0, 8.0, 400.0, 1000.0]),
        kind=["broadcast", "broadcast", "all_reduce", "broadcast"],
        elem_bytes=np.array([4.0, 8.0, 4.0, 4.0]),
    )
    fwd = spans((0, 100), (1000, 1100))
    out = forward_broadcast_messages(msgs, fwd, np.array([0.0, 1000.0]), np.array([1000.0, 2000.0]))
    assert out == {"forward_broadcast_bytes_per_step": 1004.0, "forward_broadcast_msgs_per_step": 1.5}
    assert forward_broadcast_messages(no_messages(), fwd, np.array([0.0]), np.array([1.0])) == {}


def _ddp_step(b, t0, logging_allreduce):
    """One CPU/gloo DDP step shaped like a real torch 2.13 trace: c10d::broadcast_ inside
    DistributedDataParallel.forward with gloo:broadcast on a gloo thread (the training thread waits
    for it), the bucket's c10d::allreduce_ inside an autograd evaluate_function whose gloo:all_reduce
    starts after that span ended, then (optionally) a metric all-reduce the loop issues itself."""
    worker = b.tid + 7
    b.step(1 + t0 // 1000, t0, t0 + 1000)
    b.annotation("DistributedDataParallel.forward", t0 + 10, t0 + 500)
    b.op("c10d::broadcast_", t0 + 20, t0 + 30)
    b.annotation("gloo:broadcast", t0 + 25, t0 + 300, tid=worker)  # 30-300 exposed
    b.op("aten::linear", t0 + 300, t0 + 500)
    b.op("autograd::engine::evaluate_function: AddmmBackward0", t0 + 500, t0 + 700)
    b.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", t0 + 700, t0 + 720)
    b.op("c10d::allreduce_", t0 + 705, t0 + 715)
    b.annotation("gloo:all_reduce", t0 + 722, t0 + 800, tid=worker)  # 722-800 exposed
    if logging_allreduce:
        b.op("c10d::allreduce_", t0 + 800, t0 + 805)
        b.annotation("gloo:all_reduce", t0 + 806, t0 + 900, tid=worker)  # 806-900 exposed
    b.op("aten::add_", t0 + 900, t0 + 950)


def test_a_gloo_ddp_trace_splits_buffer_broadcast_gradient_and_script_collectives(tmp_path):
    b = TraceBuilder(backend="gloo", world_size=2)
    _ddp_step(b, 0, logging_allreduce=True)
    _ddp_step(b, 1000, logging_allreduce=True)
    path = b.write(tmp_path / "rank0.json")
    ex = summarize(load_rank_trace(path), 0).extras
    assert ex["exposed_forward_broadcast_us_per_step"] == pytest.approx(270)
    assert ex["exposed_backward_allreduce_us_per_step"] == pytest.approx(78)
    assert ex["exposed_loop_sync_us_per_step"] == pytest.approx(94)
    assert ex["exposed_other_collective_us_per_step"] == 0
    assert ex["forward_broadcasts_per_step"] == 1 and ex["loop_syncs_per_step"] == 1
    assert ex["backward_allreduces_per_step"] == 1
    assert "forward_broadcast_bytes_per_step" not in ex  # gloo on CPU: no sized records


def test_without_pairing_the_records_own_start_decides(tmp_path):
    """One c10d call missing (a collective issued from C++): records are grouped by their own start, so the
    gradient all-reduce that starts after its evaluate_function span is not counted as a gradient bucket."""
    b = TraceBuilder(backend="gloo", world_size=2)
    _ddp_step(b, 0, logging_allreduce=False)
    b.annotation("gloo:all_reduce", 960, 980, tid=b.tid + 7)  # no c10d:: call for this one
    ex = summarize(load_rank_trace(b.write(tmp_path / "rank0.json")), 0).extras
    assert ex["exposed_forward_broadcast_us_per_step"] == pytest.approx(270)  # the record starts in the forward
    assert ex["exposed_backward_allreduce_us_per_step"] == 0
    assert ex["exposed_loop_sync_us_per_step"] == pytest.approx(78 + 20)  # 722-800 and 960-980


def test_device_ops_are_grouped_by_their_launch_call():
    from ddpdoctor.metrics.collective_groups import launch_times

    got = launch_times(np.array([7, 3, 9, -1]), np.array([3, 5, 7]), np.array([30.0, 50.0, 70.0]))
    assert got[:2].tolist() == [70.0, 30.0] and np.isnan(got[2]) and np.isnan(got[3])
    assert np.isnan(launch_times(np.array([1]), np.empty(0, dtype=np.int64), np.empty(0))).all()
