"""Call sites of a gloo size mismatch (logs/callsite.py): ranks in different collectives are an op mismatch
(FL021), not tensors of different sizes in one collective (the padding fix)."""

from ddpdoctor.logs.callsite import apply_callsite_root, last_tracebacks, site_of
from ddpdoctor.logs.model import LogEvent

MSG = (
    "what():  [enforce fail at gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 267788 vs 4. "
    "Received data size doesn't match expected size. Is there a distributed collective mismatch in your code?"
)
TORCH = "/env/lib/python3.11/site-packages/torch"
BACKWARD_TB = f'''Traceback (most recent call last):
  File "/w/train.py", line 90, in <module>
    main()
  File "/w/train.py", line 66, in main
    loss.backward()
  File "{TORCH}/_tensor.py", line 623, in backward
  File "{TORCH}/autograd/__init__.py", line 395, in backward
  File "{TORCH}/autograd/graph.py", line 979, in _engine_run_backward
RuntimeError: Read error [127.0.0.1]:10158: Connection reset by peer.'''
ALLREDUCE_LINES = [
    'File "/w/train.py", line 90, in <module>',
    'File "/w/train.py", line 80, in main',
    f'File "{TORCH}/distributed/c10d_logger.py", line 83, in wrapper',
    f'File "{TORCH}/distributed/distributed_c10d.py", line 2951, in all_reduce',
]


def _facts(rank=0):
    return {
        "failure.root_cause.kind": "exception",
        "failure.message.id": "gloo.size_mismatch",
        "failure.message.text": MSG,
        "failure.message.rank": rank,
        "logs.world_size": 2,
        "failure.bundle.steps_completed": {"0": 5, "1": 5},
    }


def _exc(rank, tb):
    return LogEvent(rank, 1.0, "exception", "RuntimeError", "events.jsonl", 3, {"traceback": tb})


def test_sites_from_a_traceback():
    frames = last_tracebacks([], [_exc(1, BACKWARD_TB)])[1]
    assert site_of(frames) == {"op": "the DDP gradient all-reduce (in backward)", "where": "train.py:66"}
    lines = [["r0.log", i, t, 0, None, None, None] for i, t in enumerate(ALLREDUCE_LINES)]
    assert site_of(last_tracebacks(lines)[0]) == {"op": "`all_reduce`", "where": "train.py:80"}
    assert site_of([("/w/train.py", 5, "main")]) is None


def test_a_rank_aborted_without_a_traceback_is_placed_by_its_buffer_against_ddps_buckets():
    f = _facts()
    apply_callsite_root(f, {"config.ddp.bucket_sizes_bytes": [1071144, 526336]}, [], [_exc(1, BACKWARD_TB)])
    assert f["failure.root_cause.kind"] == "op_mismatch" and f["failure.bundle.own_collective_rank"] == 0
    assert f["failure.bundle.by_rank"][0].startswith("rank 0: in a collective of 4 bytes of its own")
    assert f["failure.bundle.by_rank"][1] == "rank 1: in the DDP gradient all-reduce (in backward) at train.py:66"
    assert f["failure.bundle.sizes"] == "267788 vs 4 bytes"


def test_both_tracebacks_name_two_call_sites():
    f = _facts()
    lines = [["r0.log", i, t, 0, None, None, None] for i, t in enumerate(ALLREDUCE_LINES)]
    apply_callsite_root(f, {}, lines, [_exc(1, BACKWARD_TB)])
    assert f["failure.root_cause.kind"] == "op_mismatch"
    assert "rank 0: in `all_reduce` at train.py:80" in f["failure.bundle.by_rank"]


def test_a_size_mismatch_at_one_call_site_keeps_the_padding_fix():
    same = _facts()
    apply_callsite_root(
        same, {"config.ddp.bucket_sizes_bytes": [1071144]}, [], [_exc(0, BACKWARD_TB), _exc(1, BACKWARD_TB)]
    )
    assert same["failure.root_cause.kind"] == "exception" and "failure.bundle.cause" not in same
    # a buffer as large as DDP's pieces could be one of them: not placed elsewhere
    big = _facts()
    big["failure.message.text"] = MSG.replace("267788 vs 4", "8773728 vs 8386560")
    apply_callsite_root(big, {"config.ddp.bucket_sizes_bytes": [26214400]}, [], [_exc(1, BACKWARD_TB)])
    assert big["failure.root_cause.kind"] == "exception"
    # without DDP's buckets recorded, an aborted rank's collective is unknown: nothing is claimed
    bare = _facts()
    apply_callsite_root(bare, {}, [], [_exc(1, BACKWARD_TB)])
    assert bare["failure.root_cause.kind"] == "exception"
