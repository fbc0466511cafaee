"""Unit checks of the shared machinery: capped reads, streamed gunzip, bounded logs, redaction."""

from __future__ import annotations

import gzip
import os

import pytest

from ddpdoctor import safe_io
from ddpdoctor.errors import InputError
from ddpdoctor.redact import SecretMemory, redact_known_formats, redact_text, strip_terminal


def test_fifo_refused_without_blocking(tmp_path):
    p = tmp_path / "rank0.json"
    os.mkfifo(p)
    with pytest.raises(InputError, match="FIFO"):
        safe_io.read_head(p, 10)


def test_loop_and_dangling_are_one_line(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    (tmp_path / "d").symlink_to("nowhere")
    with pytest.raises(InputError, match="symlink loop"):
        safe_io.check_regular(tmp_path / "a")
    with pytest.raises(InputError, match="dangling"):
        safe_io.check_regular(tmp_path / "d")


def test_gunzip_stops_at_the_cap():
    bomb = gzip.compress(b"\0" * (8 << 20)) * 4
    with pytest.raises(InputError, match="limit of 1048576"):
        safe_io.gunzip_capped(bomb, "x.gz", 1 << 20)
    assert safe_io.gunzip_capped(gzip.compress(b"ab") + gzip.compress(b"cd"), "x", 100) == b"abcd"


def test_log_stream_cuts_lines_and_says_so(tmp_path, monkeypatch):
    p = tmp_path / "train.log"
    p.write_bytes(b"ok\n" + b"x" * 200_000 + b"\nend\n")
    warnings = []
    text = safe_io.read_log_text(p, warnings)
    assert text.startswith("ok\n") and text.endswith("end\n") and len(text) < 70_000
    assert any("cut" in w for w in warnings)
    monkeypatch.setenv("DDPDOCTOR_MAX_LOG_BYTES", "10")
    warnings = []
    safe_io.read_log_text(p, warnings)
    assert any("only the first 10 bytes" in w for w in warnings)


def test_world_size_sanity():
    w = []
    assert safe_io.sane_world_size(10**9, "t", w) is None and w
    assert safe_io.sane_world_size(8, "t") == 8


def test_redaction_patterns_and_known_values():
    known = SecretMemory()
    text = (
        "Authorization: Bearer abcdefghij123456\n-----BEGIN PRIVATE KEY-----\nBODYLINEzz\n-----END PRIVATE KEY-----\n"
        "args ['--api-key', 'plainkey99']\nWANDB_API_KEY=0123456789abcdef0123456789abcdef01234567\n"
    )
    known.collect(text)
    out = redact_text(text, known)
    for s in ("abcdefghij123456", "BODYLINEzz", "plainkey99", "0123456789abcdef0123456789abcdef01234567"):
        assert s not in out
    assert "plainkey99" not in redact_text("echo plainkey99 later", known)


def test_kernel_names_kept_and_escapes_stripped():
    k = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"
    assert redact_known_formats(k) == k
    assert strip_terminal("a\x1b]0;t\x07b\x1b[31mc\x1b[0m") == "abc"
