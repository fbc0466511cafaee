"""``analyze --scheduler`` and URL inputs against real local servers: a Dask ``LocalCluster`` (two worker
processes) and moto's S3-compatible server, both on 127.0.0.1 and up for a few seconds.  The test is
that the diagnosis does not depend on where the ranks were decoded or where the files lie: the same
verdict, top finding and per-rank numbers as the plain local run of the bundled samples."""

import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddpdoctor import executors
from ddpdoctor.analysis import AnalyzeOptions
from ddpdoctor.cli import main
from ddpdoctor.diagnosis import run_analyze

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ["synthetic_gpu_8ranks_straggler_rank3", "gloo_cpu_2ranks_slow_loader_straggler"]


def need(module: str):
    """The test extra installs these; in CI a missing one fails instead of skipping."""
    if os.environ.get("CI"):
        return __import__(module, fromlist=["_"])
    return pytest.importorskip(module, reason=f"{module} comes with the test extra: pip install -e '.[test]'")


def digest(report) -> dict:
    d = report.diagnosis
    top = d.findings[0]
    return {
        "verdict": (d.verdict.bottleneck, d.verdict.rule, d.verdict.label, d.verdict.expected_speedup),
        "top": (top.rule, top.ranks, top.summary, top.cost),
        "findings": [f.rule for f in d.findings],
        "ranks": {s.rank: {c: list(v) for c, v in s.values.items()} for s in report.analysis.summaries},
        "events": {s.rank: s.n_events for s in report.analysis.summaries},
    }


@pytest.fixture(scope="module")
def local():
    return {name: digest(run_analyze([str(ROOT / "sample_traces" / name)])) for name in SAMPLES}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3():
    """moto's server with a bucket holding a copy of each sample folder; AWS_* point at it."""
    need("s3fs")
    server_mod = need("moto.server")
    import s3fs

    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_MAX_ATTEMPTS": "1",
    }
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v)
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem()
    fs.mkdir("traces")
    for name in SAMPLES:
        for f in sorted((ROOT / "sample_traces" / name).rglob("*")):
            if f.is_file():
                fs.pipe(f"traces/{name}/{f.relative_to(ROOT / 'sample_traces' / name).as_posix()}", f.read_bytes())
    try:
        yield {"env": env, "fs": fs}
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        mp.undo()
        server.stop()


def bucket_state(fs) -> dict:
    fs.invalidate_cache()
    return {k: (v["size"], v.get("ETag")) for k, v in fs.find("traces", detail=True).items()}


@pytest.fixture(scope="module")
def cluster(s3):
    """Two worker processes (started after the AWS_* settings, so they can read s3:// too)."""
    distributed = need("distributed")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        worker_dashboard_address=None,
    ) as c:
        yield c.scheduler_address


@pytest.fixture
def dask_only(monkeypatch):
    """Fails the test if the ranks run anywhere but the cluster."""

    def elsewhere(*_a, **_k):
        raise AssertionError("ranks ran locally, not on the Dask cluster")

    monkeypatch.setattr(executors, "in_process", elsewhere)
    monkeypatch.setattr(executors, "local_processes", elsewhere)


@pytest.mark.slow  # a local Dask cluster per module, every sample
@pytest.mark.parametrize("name", SAMPLES)
def test_dask_cluster_gives_the_local_diagnosis(cluster, local, dask_only, name):
    seen = []
    report = run_analyze([str(ROOT / "sample_traces" / name)], AnalyzeOptions(scheduler=cluster), progress=seen.append)
    assert digest(report) == local[name]
    assert sorted(seen) == sorted(local[name]["ranks"])  # progress: one call per rank, from the cluster


@pytest.mark.parametrize("name", SAMPLES)
def test_s3_url_gives_the_local_diagnosis_and_writes_nothing(s3, local, name):
    before = bucket_state(s3["fs"])
    report = run_analyze([f"s3://traces/{name}/"])
    assert digest(report) == local[name]
    assert report.inputs == [f"s3://traces/{name}/"]
    assert all(p.startswith(f"s3://traces/{name}/") for s in report.analysis.summaries for p in s.paths)
    assert any("not from s3://" in w for w in report.warnings)  # logs: local paths only, and it says so
    assert bucket_state(s3["fs"]) == before


@pytest.mark.slow  # starts the local Dask cluster (the fast tier reads S3 in process)
def test_dask_cluster_reads_s3(cluster, s3, local, dask_only):
    name = SAMPLES[0]
    report = run_analyze([f"s3://traces/{name}/"], AnalyzeOptions(scheduler=cluster))
    assert digest(report) == local[name]


def test_only_compact_summaries_come_back(s3):
    """What a worker returns for one rank is much smaller than the rank's decoded trace."""
    from ddpdoctor.analysis import _rank_slice, _worker
    from ddpdoctor.bundle.discover import discover
    from ddpdoctor.trace.decode import read_bytes

    disc = discover([f"s3://traces/{SAMPLES[0]}/"])
    for rank in disc.ranks:
        out = _worker((rank, _rank_slice(disc, rank), AnalyzeOptions()))
        assert out[3] is None and out[1].rank == rank
        assert len(pickle.dumps(out)) < len(read_bytes(disc.by_rank[rank][0].path)) / 4


def cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "ddpdoctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def assert_one_line(res, code: int, *needles):
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    err = res.stderr.strip()
    assert "Traceback" not in res.stderr and len(err.splitlines()) == 1, err
    assert err.startswith("ddpdoctor: error: ")
    for n in needles:
        assert n in err, err


@pytest.mark.slow  # a moto S3 server and two `ddpdoctor analyze` processes
def test_cli_on_s3_prints_the_local_card(s3):
    name = SAMPLES[0]
    here = cli("analyze", f"sample_traces/{name}")
    there = cli("analyze", f"s3://traces/{name}/", env=s3["env"])
    assert here.returncode == there.returncode == 0, there.stderr
    verdict = [ln for ln in here.stdout.splitlines() if ln.startswith("Verdict:")]
    assert verdict and verdict == [ln for ln in there.stdout.splitlines() if ln.startswith("Verdict:")]


@pytest.mark.slow  # waits out the connection timeout
def test_unreachable_scheduler_is_one_line_exit_4():
    need("distributed")
    res = cli("analyze", "--scheduler", f"tcp://127.0.0.1:{free_port()}", f"sample_traces/{SAMPLES[1]}")
    assert_one_line(res, 4, "cannot reach the Dask scheduler", f"within {executors.SCHEDULER_TIMEOUT_S} s")


@pytest.mark.parametrize("address", ["not-an-address", "tcp://host-without-port", "foo://x:1"])
def test_bad_scheduler_address_is_one_line_exit_2(address):
    need("distributed")
    res = CliRunner().invoke(main, ["analyze", "--scheduler", address, str(ROOT / "sample_traces" / SAMPLES[1])])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().startswith("ddpdoctor: error: --scheduler") and len(res.stderr.strip().splitlines()) == 1


def test_missing_dask_extra_is_one_line_exit_2(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed → ImportError
    res = CliRunner().invoke(
        main, ["analyze", "--scheduler", "tcp://127.0.0.1:8786", str(ROOT / "sample_traces" / SAMPLES[1])]
    )
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "pip install 'ddpdoctor[dask]'" in err, err


def test_missing_store_backend_names_the_package(monkeypatch):
    need("fsspec")
    registry = sys.modules["fsspec.registry"]

    monkeypatch.delitem(registry._registry, "gs", raising=False)
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    res = CliRunner().invoke(main, ["analyze", "gs://bucket/run/"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        "ddpdoctor: error: gs://bucket/run/: reading gs:// needs gcsfs, which is not installed: pip install gcsfs"
    )


def test_missing_bucket_and_unknown_scheme_are_bad_input(s3):
    assert_one_line(cli("analyze", "s3://no-such-bucket/run/", env=s3["env"]), 2, "no such file or directory")
    assert_one_line(cli("analyze", "nosuch://bucket/run/"), 2, "unknown URL scheme nosuch://")


def test_unreachable_store_is_one_line_exit_4():
    need("s3fs")
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_MAX_ATTEMPTS": "1",
    }
    assert_one_line(cli("analyze", "s3://traces/run/", env=env), 4, "s3://traces/run/: cannot read from the store")
