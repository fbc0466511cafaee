"""`ddpdoctor run` keeps Kineto's status lines out of the terminal (#14 item 3), the log keeps them."""

import io

from ddpdoctor.capture.host.streams import _NoiseFilter, strip_profiler_noise

# as printed: pytorch/kineto#726 (STAGE), and torch 2.13 on this machine (USDT, two ranks glued)
STAGE = b"STAGE:2023-02-21 15:15:48 101902:101902 ActivityProfilerController.cpp:294] Completed Stage: Warm Up\n"
USDT = b"USDT:2026-11-22 19:06:23 1351:1351 SyncActivityProfilerHandler.cpp:52] profiler_start"
USDT2 = b"USDT:2026-11-22 19:06:23 1350:1350 SyncActivityProfilerHandler.cpp:52] profiler_start"


def test_strip_lines():
    assert strip_profiler_noise(STAGE) == b""
    assert strip_profiler_noise(USDT + USDT2 + b"\n") == b""  # glued by two ranks
    assert strip_profiler_noise(b"[default1]:" + USDT + b"\n") == b""
    assert strip_profiler_noise(b"epoch 1 loss 0.5" + USDT + b"\n") == b"epoch 1 loss 0.5\n"
    line = b"rank 1: OOM at step 4, skipping this batch\n"
    assert strip_profiler_noise(line) == line
    assert strip_profiler_noise(b"USDT: not kineto\n") == b"USDT: not kineto\n"


def test_filter_streams_lines_and_lets_progress_bars_through():
    term = io.BytesIO()
    f = _NoiseFilter(term)
    f.write(b"step 1\n" + USDT[:20])  # a noise line split across two reads
    assert term.getvalue() == b"step 1\n"
    f.write(USDT[20:] + b"\nstep 2\n 40%|####      | 4/10\r")
    assert term.getvalue() == b"step 1\nstep 2\n 40%|####      | 4/10\r"  # the bar is not held back
    f.write(STAGE + b"done")
    f.close()
    assert term.getvalue().endswith(b"4/10\rdone") and b"STAGE" not in term.getvalue()


def test_failure_timeline_is_cut_at_words_never_mid_word():
    from ddpdoctor.run_timeline import _short

    msg = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which "
        "1.05 GiB is free. Of the allocated memory 75.20 GiB is allocated by PyTorch"
    )
    short = _short(msg, 100)
    assert short.endswith(" …") and msg.startswith(short[:-2]) and msg[len(short) - 2] == " "
    assert _short("one line\nsecond line", 100) == "one line" and _short(None, 10) == ""
