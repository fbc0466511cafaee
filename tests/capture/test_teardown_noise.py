"""After the user's Ctrl-C, gloo's teardown noise stays off the terminal (the rank logs keep every byte);
before it, and for any other line, the terminal gets what the ranks print."""

from __future__ import annotations

import io
import threading

from ddpdoctor.capture.host.streams import TeardownFilter, _NoiseFilter

GLOO_TRACEBACK = (
    b"[rank1]: Traceback (most recent call last):\n"
    b'[rank1]:   File "/home/u/train.py", line 40, in <module>\n'
    b"[rank1]:     loss.backward()\n"
    b"[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    b"[127.0.0.1]:29500\n"
)
USER_TRACEBACK = (
    b"[rank0]: Traceback (most recent call last):\n"
    b'[rank0]:   File "/home/u/train.py", line 41, in <module>\n'
    b"[rank0]: KeyboardInterrupt\n"
)


def _through(data: bytes, stopped: bool) -> bytes:
    ev = threading.Event()
    if stopped:
        ev.set()
    term = io.BytesIO()
    f = _NoiseFilter(term, ev)
    for i in range(0, len(data), 7):  # arrives in pieces
        f.write(data[i : i + 7])
    f.close()
    return term.getvalue()


def test_after_ctrl_c_gloo_tracebacks_and_lines_are_dropped_the_rest_kept():
    data = b"epoch 1 loss 0.5\n" + GLOO_TRACEBACK + USER_TRACEBACK + b"[rank1]: Connection reset by peer\n"
    shown = _through(data, stopped=True)
    assert b"gloo" not in shown and b"Connection" not in shown
    assert shown == b"epoch 1 loss 0.5\n" + USER_TRACEBACK


def test_without_the_users_interrupt_everything_reaches_the_terminal():
    data = b"epoch 1 loss 0.5\n" + GLOO_TRACEBACK + USER_TRACEBACK
    assert _through(data, stopped=False) == data


def test_interleaved_ranks_are_judged_separately():
    ev = threading.Event()
    ev.set()
    f = TeardownFilter(ev)
    user, gloo = USER_TRACEBACK.splitlines(keepends=True), GLOO_TRACEBACK.splitlines(keepends=True)
    out = b""
    for a, b in zip(user, gloo, strict=False):
        out += f.feed(a) + f.feed(b)
    out += b"".join(f.feed(x) for x in gloo[len(user) :]) + f.flush()
    assert out == USER_TRACEBACK


def test_a_traceback_cut_short_is_shown_at_the_end():
    cut = b"Traceback (most recent call last):\n" + b'  File "train.py", line 3, in <module>\n'
    assert _through(cut, stopped=True) == cut


def test_the_chaining_line_after_a_dropped_gloo_traceback_goes_with_it():
    # as a rank printed it live: gloo's error, then the KeyboardInterrupt raised while handling it
    chained = (
        GLOO_TRACEBACK.replace(b"[rank1]", b"[rank0]")
        + b"\n[rank0]: During handling of the above exception, another exception occurred:\n\n"
        + USER_TRACEBACK
        + b"\n[rank1]: During handling of the above exception, another exception occurred:\n"
    )
    assert _through(chained, stopped=True) == USER_TRACEBACK + (
        b"\n[rank1]: During handling of the above exception, another exception occurred:\n"
    )
