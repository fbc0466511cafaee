"""Hostile inputs built at test time (nothing large is stored: sparse files, gzip members
repeated, tar headers that claim sizes the archive does not hold).

Each :class:`Case` is one ddpdoctor command on one hostile input with the exit codes it may
end with and the planted secrets that must not appear in any output."""

from __future__ import annotations

import gzip
import json
import os
import socket
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from tracebuilder import gpu_step_trace

OK, ERR, FAILED_RUN = 0, 2, 3  # FAILED_RUN: analyze found that the run itself failed
SECRETS = {
    "bearer": "Authorization: Bearer eyzzBearerTok3nValue998877",
    "pem": "-----BEGIN RSA PRIVATE KEY-----\nMIIEpQIBAAKCAQEAzPemBodyLine1xyz\nPemBodyLine2abcdef\n-----END RSA PRIVATE KEY-----",
    "aws": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "aws_bare": "creds wJa1rXUtnFEMI/K7MDENG/bPxRfiCYzzAMPLEKEY loaded",
    "wandb_env": "WANDB_API_KEY=0123456789abcdef0123456789abcdef0badc0de",
    "wandb_login": "wandb login 0f1e2d3c4b5a69788796a5b4c3d2e1f0aabbccdd",
    "hf": "token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "openai": "key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123",
    "slack": "xoxb-123456789012-abcdefghijklmnop",
    "github": "ghp_abcdefghijklmnopqrstuvwxyzABCDEF0123",
    "github_pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
    "url": "https://alice:Sup3rS3cretPw@db.example.com/x",
    "argv_list": "args: ['train.py', '--api-key', 'plainapikey42', '--lr', '0.1']",
    "argv_hf": "Namespace(hf_token='hfplaintok77')  cmd: --hf-token hfplaintok77",
    "password_flag": "--password pa55wordValue",
    "harmless_env": "MY_HEADER=Bearer harmlessNameTok55aa",
    # a key's base64 body inside an error line, no BEGIN/END markers anywhere (issue 41)
    "der_inline": "RuntimeError: could not parse key MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKjMzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvuNMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZqgtzJ6GR3eqoYSW9b9UMvkBpZODSctWSNGj3P7jRFDO5VoTwCQAWbFnOjDfH5Ulgp2PKSQnSJP3AJLQNFNe7br1XbrhV//eO+t51mIpGSDCUv3E0DDFcWDTH9cXDTTlRZVEiR2BwpZOOkE/Z0/BVnhZYL71oZV34bKfWjQIt6V/isSMahdsAASACp4ZTGtwiVuNd9tybAgMBAAECggEBAKTmjaS6tkK8BlPXClTQ2vpz/N6uxDeS35mXpqasqskVlaAidgg/sWqpjXDbXr93otIMLlWsM+X0CqMDgSXKejLS2jx4GDjI1ZTXg++0AMJ8sJ74pWzVDOfmCEQ/7wXs3+cbnXhKriO8Z036q92Qc1+N87SI38nkGa0ABH9CN83HmQqt4fB7UdHzuIRe/me2PGhIq5ZBzj6h3BpoPGzEP+x3l9YmK8t/1cN0pqI+dQwYdgfGjackLu/2qH80MCF7IyQaseZUOJyKrCLtSD/Iixv/hzDEUPfOCjFDgTpzf3cwta8+oE4wHCo1iI1/4TlPkwmXx4qSXtmw4aQPz7IDQvECgYEA8KNThCO2gsC2I9PQDM/8Cw0O983WCDY+oi+7JPiNAJwv5DYBqEZB1QYdj06YD16XlC/HAZMsMku1na2TN0driwenQQWzoev3g2S7gRDoS/FCJSI3jJ+kjgtaA7Qmzlgk1TxODN+G1H91HW7t0l7VnL27IWyYo2qRRK3jzxqUiPUCgYEAx0oQs2reBQGMVZnApD1jeq7n4MvNLcPvt8b/eU9iUv6Y4Mj0Suo/AU8lYZXm8ubbqAlwz2VSVunD2tOplHyMUrtCtObAfVDUAhCndKaA9gApgfb3xw1IKbuQ1u4IF1FJl3VtumfQn//LiH1B3rXhcdyo3/vIttEk48RakUKClU8CgYEAzV7W3COOlDDcQd935DdtKBFRAPRPAlspQUnzMi5eSHMD/ISLDY5IiQHbIH83D4bvXq0X7qQoSBSNP7Dvv3HYuqMhf0DaegrlBuJllFVVq9qPVRnKxt1Il2HgxOBvbhOT+9in1BzA+YJ99UzC85O0Qz06A+CmtHEy4aZ2kj5hHjECgYEAmNS4+A8Fkss8Js1RieK2LniBxMgmYml3pfVLKGnzmng7H2+cwPLhPIzIuwytXywh2bzbsYEfYx3EoEVgMEpPhoarQnYPukrJO4gwE2o5Te6T5mJSZGlQJQj9q4ZB2Dfzet6INsK0oG8XVGXSpQvQh3RUYekCZQkBBFcpqWpbIEsCgYAnM3DQf3FJoSnXaMhrVBIovic5l0xFkEHskAjFTevO86Fsz1C2aSeRKSqGFoOQ0tmJzBEs1R6KqnHInicDTQrKhArgLXX4v3CddjfTRJkFWDbE/CkvKZNOrcf1nhaGCPspRJj2KUkj1Fhl9Cncdn/RsYEONbwQSjIfMPkvxF+8HQ== (from DEPLOY_KEY)",
}
# the part of each planted line that must never appear in an output
SECRET_VALUES = {
    "bearer": "eyzzBearerTok3nValue998877",
    "pem": "MIIEpQIBAAKCAQEAzPemBodyLine1xyz",
    "aws": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "aws_bare": "wJa1rXUtnFEMI/K7MDENG/bPxRfiCYzzAMPLEKEY",
    "wandb_env": "0123456789abcdef0123456789abcdef0badc0de",
    "wandb_login": "0f1e2d3c4b5a69788796a5b4c3d2e1f0aabbccdd",
    "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "openai": "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123",
    "slack": "xoxb-123456789012-abcdefghijklmnop",
    "github": "ghp_abcdefghijklmnopqrstuvwxyzABCDEF0123",
    "github_pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
    "url": "Sup3rS3cretPw",
    "argv_list": "plainapikey42",
    "argv_hf": "hfplaintok77",
    "password_flag": "pa55wordValue",
    "harmless_env": "harmlessNameTok55aa",
    "der_inline": "MvDuictGeurT8jNbvJZHtCSuYEvuNMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCd",
}
PEM_LINE2 = "PemBodyLine2abcdef"
# an OpenSSH-style key body printed line by line (64 base64 characters a line, a short last line)
KEY_BODY = [
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
    "pU3KGCUwux1tEyze1iN7LtkeP3IfyxlxF0SU1kk8nVw0YL4xIB5p/tqg7ui5mX9c",
    "fCmZ/a/lkyU81lSvTfrXFCegrrP+6SMvivIhH57kkcWxC+y1Vjv8Hm+TQn7LyP4p",
    "VeXNjkbcjtS3wnZNKlpNdncG+F2GkAJK1r2jQBvpyMvMyTX2zR9hImrhUziuGjQA",
    "R95jbA6AbJV7poTWQx+16tdCTQk=",
]


@dataclass
class Case:
    category: str
    id: str
    argv: list[str]
    expect: tuple[int, ...]
    secrets: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)  # files/folders the command writes
    no_escapes: bool = False
    said: str = ""  # text stdout or stderr must hold (the warning or error the case is about)
    timeout_s: float = 60
    mem_mb: int = 2500  # address-space headroom over the preloaded runner (RLIMIT_AS)
    rss_mb: int = 1500  # peak resident memory allowed


def trace(folder: Path, rank: int = 0, world: int = 2, name: str | None = None, **kw) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return gpu_step_trace(rank=rank, world_size=world, **kw).write(folder / (name or f"rank{rank}.pt.trace.json"))


def run_folder(root: Path, name: str, ranks: int = 2) -> Path:
    d = root / name
    for r in range(ranks):
        trace(d, r, ranks)
    return d


def _commands(cat: str, cid: str, src: Path, out: Path, expect, **kw) -> list[Case]:
    """analyze (with --report) and bundle on one input."""
    rep, tgz = out / f"{cid}.report", out / f"{cid}.tar.gz"
    return [
        Case(
            cat,
            f"{cid}/analyze",
            ["analyze", str(src), "--report", str(rep), "-j", "1"],
            expect,
            outputs=[str(rep)],
            **kw,
        ),
        Case(cat, f"{cid}/bundle", ["bundle", str(src), "-o", str(tgz)], expect, outputs=[str(tgz)], **kw),
    ]


def _zero_gzip_members(n_members: int, member_mb: int) -> bytes:
    one = gzip.compress(b"\0" * (member_mb << 20), 9, mtime=0)
    return one * n_members


def build_cases(root: Path) -> list[Case]:
    root.mkdir(parents=True, exist_ok=True)
    out = root / "out"
    out.mkdir()
    cases: list[Case] = []
    outside = root / "outside"
    outside.mkdir()
    (outside / "credentials").write_text("[default]\naws_secret_access_key = OUTSIDEzzSECRETzz0123456789abcdef\n")

    # ---- blocking: FIFOs, sockets, devices
    specials = {
        "fifo_trace": lambda d: os.mkfifo(d / "rank1.json"),
        "fifo_log": lambda d: os.mkfifo(d / "train.log"),
        "fifo_fr": lambda d: os.mkfifo(d / "nccl_trace_rank_1"),
        "fifo_gz": lambda d: os.mkfifo(d / "rank1.json.gz"),
        "socket_trace": lambda d: _socket(d / "rank1.json"),
        "devnull_trace": lambda d: os.symlink("/dev/null", d / "rank1.json"),
        "devzero_log": lambda d: os.symlink("/dev/zero", d / "stdout.log"),
        "urandom_log": lambda d: os.symlink("/dev/urandom", d / "rank1.log"),
        "devzero_trace": lambda d: os.symlink("/dev/zero", d / "rank1.pt.trace.json"),
        "fifo_settings": lambda d: (
            (d / "ranks" / "0").mkdir(parents=True) or os.mkfifo(d / "ranks" / "0" / "settings.json")
        ),
    }
    for cid, make in specials.items():
        d = run_folder(root, cid, 1)
        make(d)
        cases += _commands("blocking", cid, d, out, (OK, ERR), timeout_s=60)
    for cid, target in (
        ("direct_fifo", None),
        ("direct_devnull", "/dev/null"),
        ("direct_devzero", "/dev/zero"),
        ("direct_socket", "sock"),
    ):
        p = root / f"{cid}.json"
        if target is None:
            os.mkfifo(p)
        elif target == "sock":
            _socket(p)
        else:
            os.symlink(target, p)
        cases += _commands("blocking", cid, p, out, (ERR,), timeout_s=30)
        cases.append(Case("blocking", f"{cid}/report", ["report", str(p)], (ERR,), timeout_s=30))

    # ---- links
    d = run_folder(root, "loop_in_folder", 2)
    os.symlink("b.json", d / "a.json")
    os.symlink("a.json", d / "b.json")
    cases += _commands("links", "loop_in_folder", d, out, (OK,))
    d = run_folder(root, "dangling_in_folder", 2)
    os.symlink("nowhere.json", d / "rank5.json")
    os.symlink("nowhere.log", d / "x.log")
    cases += _commands("links", "dangling_in_folder", d, out, (OK,))
    p = root / "loop_direct.json"
    os.symlink(p.name, p)
    cases += _commands("links", "loop_direct", p, out, (ERR,))
    p = root / "dangling_direct.json"
    os.symlink("missing-target.json", p)
    cases += _commands("links", "dangling_direct", p, out, (ERR,))
    d = run_folder(root, "link_outside", 1)
    os.symlink(outside / "credentials", d / "train.log")
    os.symlink(outside, d / "linkdir")
    cases += _commands("links", "link_outside", d, out, (OK, ERR), secrets=["OUTSIDEzzSECRETzz0123456789abcdef"])

    # ---- memory
    d = run_folder(root, "gzip_bomb", 1)
    (d / "rank1.pt.trace.json.gz").write_bytes(_zero_gzip_members(48, 64))  # 3 GiB of zeros, ~3 MB
    cases += _commands("memory", "gzip_bomb", d, out, (OK, ERR))
    p = root / "gzip_bomb_direct.json.gz"
    p.write_bytes(_zero_gzip_members(48, 64))
    cases += _commands("memory", "gzip_bomb_direct", p, out, (ERR,))
    cases.append(
        Case(
            "memory",
            "gzip_bomb_small_cap/analyze",
            ["analyze", str(p), "-j", "1"],
            (ERR,),
            env={"DDPDOCTOR_MAX_TRACE_BYTES": "8M"},
        )
    )
    for cid, world in (("world_1e9_trace", 10**9), ("world_1e18_trace", 10**18), ("world_huge_int", 10**40)):
        d = root / cid
        trace(d, 0, world)
        trace(d, 1, world)
        cases += _commands("memory", cid, d, out, (OK, ERR))
    d = run_folder(root, "world_1e9_nccl", 1)
    (d / "nccl.log").write_text(
        "host1:123:456 [0] NCCL INFO comm 0x55d0 rank 0 nranks 1000000000 cudaDev 0 "
        "nvmlDev 0 busId 1000 commId 0x1 - Init COMPLETE\n"
    )
    cases += _commands("memory", "world_1e9_nccl", d, out, (OK, ERR))
    d = run_folder(root, "sparse_log", 1)
    with open(d / "train.log", "wb") as fh:  # 600 MB of NULs, no newline, sparse on disk
        fh.truncate(600 << 20)
    cases += _commands("memory", "sparse_log", d, out, (OK, ERR), timeout_s=90)
    d = run_folder(root, "long_lines_log", 1)
    with open(d / "train.log", "wb") as fh:
        line = b"x" * (3 << 20) + b"\n"
        for _ in range(20):
            fh.write(line)
    cases += _commands("memory", "long_lines_log", d, out, (OK, ERR))
    for cid, member in (("tar_huge_member", "report.json"), ("tar_huge_nested", "x/report.json")):
        p = root / f"{cid}.tar"
        _tar_claiming(p, member, 2 << 30)
        cases.append(Case("memory", f"{cid}/report", ["report", str(p)], (ERR,)))
        cases.append(Case("memory", f"{cid}/compare", ["compare", str(p), str(p)], (ERR,)))

    # ---- decode
    bad_traces = {
        "ts_1e400": b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1e400,"dur":1}]}',
        "ts_bigint": b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1'
        + b"0" * 400
        + b',"dur":1}]}',
        "nest_100k": b'{"traceEvents":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "nest_obj": b'{"traceEvents":[{"args":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}]}",
        "bad_utf8": b'{"traceEvents":[{"ph":"X","name":"\xff\xfe\xc3","ts":1,"dur":1,"pid":0,"tid":0}]}',
        "empty": b"",
        "truncated": b'{"traceEvents":[{"ph":"X","name":"k"',
        "not_json": b"\x89PNG\r\n\x1a\n" + b"\0" * 100,
        "corrupt_gz": b"\x1f\x8b\x08\x00" + b"garbage" * 10,
        "neg_rank": json.dumps(
            {
                "distributedInfo": {"rank": -3, "world_size": 2},
                "traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 1}],
            }
        ).encode(),
        "rank_str": json.dumps(
            {
                "distributedInfo": {"rank": "zero", "world_size": "x"},
                "traceEvents": [{"ph": "X", "name": "k", "ts": "a", "dur": None}],
            }
        ).encode(),
        "nan_ts": b'{"traceEvents":[{"ph":"X","name":"k","ts":NaN,"dur":Infinity,"pid":0,"tid":0}]}',
        "wrong_types": b'{"traceEvents":[1,"x",null,{"ph":5,"ts":[],"dur":{}}]}',
        "events_not_list": b'{"traceEvents":{"a":1}}',
    }
    for cid, data in bad_traces.items():
        p = root / f"{cid}.json"
        p.write_bytes(data)
        # a 400-digit integer timestamp decodes as an unusable number (0): analysed, not refused
        cases += _commands("decode", f"{cid}_direct", p, out, (OK, ERR) if cid == "ts_bigint" else (ERR,))
        d = run_folder(root, f"{cid}_in_folder", 2)
        (d / "rank7.json").write_bytes(data)
        cases.append(Case("decode", f"{cid}_in_folder/analyze", ["analyze", str(d), "-j", "1"], (OK, ERR)))
    # a rank outside world_size beside good traces: the whole input is refused (README: exit 2)
    for cid, rank, world in (("rank_minus1_beside_0", -1, 2), ("world_negative", 1, -2), ("world_zero", 1, 0)):
        d = root / cid
        trace(d, 0, world if world <= 0 else 2)
        trace(d, rank, world, name=f"r{cid}.pt.trace.json")
        for c in _commands("decode", cid, d, out, (ERR,)):
            c.said = "out of range for world_size"
            cases.append(c)
    # torchrun's error.json (attempt_N/<local rank>/) nested too deeply: that record skipped, the rest analyzed
    d = run_folder(root, "error_json_deep", 2)
    for lr, text in (
        (
            0,
            json.dumps(
                {"message": {"message": "RuntimeError: boom on rank 0", "extraInfo": {"timestamp": "1700000000"}}}
            ),
        ),
        (1, '{"message": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    ):
        (d / "attempt_0" / str(lr)).mkdir(parents=True)
        (d / "attempt_0" / str(lr) / "error.json").write_text(text)
    rep = out / "error_json_deep.report"
    cases.append(
        Case(
            "decode",
            "error_json_deep/analyze",
            ["analyze", str(d), "--report", str(rep), "-j", "1"],
            (FAILED_RUN,),
            outputs=[str(rep)],
            said="nested too deeply",
        )
    )
    cases.append(
        Case(
            "decode",
            "error_json_deep/bundle",
            ["bundle", str(d), "-o", str(out / "error_json_deep.tgz")],
            (OK,),
            outputs=[str(out / "error_json_deep.tgz")],
        )
    )
    d = run_folder(root, "events_jsonl_deep", 2)
    (d / "ranks" / "rank1").mkdir(parents=True)
    (d / "ranks" / "rank1" / "events.jsonl").write_text(
        '{"kind": "step", "step": 1, "time": 1700000000}\n{"kind": "step", "x": ' + "[" * 20_000 + "]" * 20_000 + "}\n"
    )
    cases.append(
        Case(
            "decode", "events_jsonl_deep/analyze", ["analyze", str(d), "-j", "1"], (OK,), said="JSON nested too deeply"
        )
    )
    good = root / "good"
    run_folder(root, "good", 2)
    rep = out / "good.report"
    cases.append(Case("decode", "good/analyze", ["analyze", str(good), "--report", str(rep), "-j", "1"], (OK,)))
    bad_reports = {
        "nan": '{"schema": "ddpdoctor.diagnosis/1", "verdict": NaN}',
        "wrong_types": '{"schema": "ddpdoctor.diagnosis/1", "verdict": 5, "findings": "x", "facts": [1], "analysis": 3}',
        "deep": '{"schema": "ddpdoctor.diagnosis/1", "facts": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "bad_utf8": '{"schema": "ddpdoctor.diagnosis/1", "x": "\udcff"}',
        "list": "[1, 2, 3]",
        "infinity": '{"schema": "ddpdoctor.diagnosis/1", "facts": {"a": -Infinity}}',
    }
    for cid, text in bad_reports.items():
        p = root / f"report_{cid}.json"
        p.write_bytes(text.encode("utf-8", "surrogateescape"))
        cases.append(Case("decode", f"report_{cid}/report", ["report", str(p)], (ERR,)))
        cases.append(Case("decode", f"report_{cid}/compare", ["compare", str(p), str(p)], (ERR,)))
    for cid, data in (
        ("garbage", b"not an archive at all" * 50),
        ("gz_garbage", gzip.compress(b"junk" * 100)),
        ("truncated_gz", gzip.compress(b"x" * 10000)[:50]),
        ("empty", b""),
    ):
        p = root / f"archive_{cid}.tar.gz"
        p.write_bytes(data)
        cases.append(Case("decode", f"archive_{cid}/report", ["report", str(p)], (ERR,)))
        cases.append(Case("decode", f"archive_{cid}/compare", ["compare", str(p), str(p)], (ERR,)))
        cases.append(
            Case("decode", f"archive_{cid}/bundle", ["bundle", str(p), "-o", str(out / f"a_{cid}.tgz")], (ERR,))
        )

    # ---- secrets: each planted in a log, in settings/manifest records, in a file name
    for key, line in SECRETS.items():
        d = run_folder(root, f"secret_{key}", 2)
        (d / "output.log").write_text(
            f"starting\n{line}\nTraceback (most recent call last):\n  RuntimeError: request failed {line}\n"
        )
        secrets = [SECRET_VALUES[key]] + ([PEM_LINE2] if key == "pem" else [])
        # (an error line of its own, the key's: analyze may call the run failed, exit 3)
        expect = (OK, FAILED_RUN) if key == "der_inline" else (OK,)
        cases += _commands("secrets", f"secret_{key}", d, out, expect, secrets=secrets)
    d = run_folder(root, "secret_records", 2)
    (d / "manifest.json").write_text(
        json.dumps(
            {
                "argv": ["train.py", "--api-key", "recordApiKey9911", "--hf-token=recordHfTok3344"],
                "env": {"HF_TOKEN": "envHfTokenValue5566", "HARMLESS": "Bearer envBearerInHarmless77"},
            }
        )
    )
    (d / "stdout.log").write_text(
        "echo argv: ['train.py', '--api-key', 'recordApiKey9911']\ntoken is envHfTokenValue5566 again\n"
    )
    rs = ["recordApiKey9911", "recordHfTok3344", "envHfTokenValue5566", "envBearerInHarmless77"]
    cases += _commands("secrets", "secret_records", d, out, (OK,), secrets=rs)
    # a key printed across lines: BEGIN in stdout's log, the body and END in stderr's
    d = run_folder(root, "pem_split_files", 2)
    (d / "output.log").write_text(
        "starting\nloading deploy key\n-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(KEY_BODY[:2]) + "\n"
    )
    (d / "stderr.log").write_text(
        "\n".join(KEY_BODY[2:]) + "\n-----END OPENSSH PRIVATE KEY-----\n"
        'Traceback (most recent call last):\n  File "train.py", line 3\nRuntimeError: bad key\n'
    )
    cases += _commands("secrets", "pem_split_files", d, out, (OK, FAILED_RUN), secrets=KEY_BODY)
    # the body interleaved with another rank's lines, each with its torchrun prefix
    d = run_folder(root, "pem_interleaved", 2)
    lines = ["[rank0]: -----BEGIN PRIVATE KEY-----"]
    for i, b in enumerate(KEY_BODY):
        lines += [f"[rank0]: {b}", f"[rank1]: step {i} loss 0.5"]
    lines += ["[rank0]: -----END PRIVATE KEY-----", "[rank0]: RuntimeError: failed"]
    (d / "output.log").write_text("\n".join(lines) + "\n")
    cases += _commands("secrets", "pem_interleaved", d, out, (OK, FAILED_RUN), secrets=KEY_BODY)
    # body lines with no marker anywhere: key material on their own (the short last line follows them)
    d = run_folder(root, "pem_body_only", 2)
    (d / "output.log").write_text("starting\n" + "\n".join(KEY_BODY) + "\nRuntimeError: CUDA error: out of memory\n")
    cases += _commands("secrets", "pem_body_only", d, out, (OK, FAILED_RUN), secrets=KEY_BODY)
    # a `ddpdoctor run` bundle whose script echoed its secrets into ranks/rank<R>/output.log (raw on disk)
    d = run_folder(root, "secret_run_output_log", 2)
    (d / "manifest.json").write_text(
        json.dumps(
            {
                "schema": "ddpdoctor.manifest/1",
                "argv": [  # as capture writes it: redacted
                    "torchrun",
                    "train.py",
                    "--wandb-key",
                    "<redacted>",
                    "--db-url",
                    "postgres://u:<redacted>@db/x",
                ],
            }
        )
    )
    (d / "ranks" / "rank1").mkdir(parents=True)
    (d / "ranks" / "rank1" / "output.log").write_text(
        "[rank1]: args: Namespace(wandb_key='runWandbKey4455aa', db_url='postgres://u:runDbPw6677@db/x')\n"
        "[rank1]: connecting with runWandbKey4455aa\n[rank1]: token hf_RunOutputLogTok0123456789ab\n"
        "[rank1]: RuntimeError: login failed for runWandbKey4455aa\n"
    )
    cases += _commands(
        "secrets",
        "secret_run_output_log",
        d,
        out,
        (OK, FAILED_RUN),
        secrets=["runWandbKey4455aa", "runDbPw6677", "hf_RunOutputLogTok0123456789ab"],
    )
    d = run_folder(root, "secret_filename_underscore", 1)
    trace(d, 1, 2, name="rank1_sk-proj-UnderscoreNameSecretAbCdEf0123.pt.trace.json")
    cases += _commands(
        "secrets", "secret_filename_underscore", d, out, (OK,), secrets=["UnderscoreNameSecretAbCdEf0123"]
    )
    d = run_folder(root, "secret_filename", 1)
    trace(d, 1, 2, name="rank1-sk-proj-FileNameSecretAbCdEfGhIj0123.pt.trace.json")
    cases += _commands("secrets", "secret_filename", d, out, (OK,), secrets=["FileNameSecretAbCdEfGhIj0123"])

    # ---- escapes
    for cid, seq in (
        ("osc_title", "\x1b]0;pwned\x07"),
        ("csi_color", "\x1b[31mRED\x1b[0m"),
        ("osc8_link", "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\"),
        ("c1_csi", "\x9b2J"),
    ):
        d = run_folder(root, f"esc_{cid}", 2)
        (d / "output.log").write_text(f"RuntimeError: CUDA error {seq} out of memory\nNCCL WARN {seq}\n")
        # the planted lines are an OOM: analyze says the run failed (exit 3, FAILED_RUN); bundle exits 0
        cases += _commands("escapes", f"esc_{cid}", d, out, (OK, FAILED_RUN), no_escapes=True)
    return cases


def _socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))  # left bound: the file stays a socket


def _tar_claiming(path: Path, member: str, size: int) -> None:
    """A tar whose member header claims ``size`` bytes but holds 1 MiB (nothing large on disk)."""
    info = tarfile.TarInfo(member)
    info.size = size
    with open(path, "wb") as fh:
        fh.write(info.tobuf(format=tarfile.GNU_FORMAT))
        fh.write(b'{"schema": "ddpdoctor.diagnosis/1", "pad": "' + b"x" * (1 << 20))
