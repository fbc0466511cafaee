"""URL inputs (sources.py) on fsspec's in-memory store: listing, trace discovery, reading with the
same limits, and local paths left on their own code path."""

import pickle
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")  # torch depends on fsspec, so it is there wherever the tests run

from ddpdoctor import sources
from ddpdoctor.analysis import analyze
from ddpdoctor.bundle.discover import discover
from ddpdoctor.errors import InputError
from ddpdoctor.trace.decode import load_rank_trace

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "gloo_cpu_2ranks_slow_loader_straggler"


@pytest.fixture
def store(request):
    """memory://<test name>/ holding the sample's traces plus files that are not traces."""
    fs = fsspec.filesystem("memory")
    root = f"/{request.node.name.replace('[', '_').replace(']', '_')}"
    for f in sorted(SAMPLE.iterdir()):
        fs.pipe(f"{root}/run/{f.name}", f.read_bytes())
    fs.pipe(f"{root}/run/train.log", b"2026-01-01 00:00:00 INFO step 1\n")
    fs.pipe(f"{root}/run/truth.json", b"{}")
    fs.pipe(f"{root}/run/manifest.json", b'{"schema": "ddpdoctor.manifest/1"}')
    fs.pipe(f"{root}/run/hosts/node0.json", b'{"schema": "ddpdoctor.host/1"}')
    yield f"memory://{root}/run"
    fs.rm(root, recursive=True)


def test_is_url():
    assert sources.is_url("s3://bucket/run/") and sources.is_url("file:///tmp/x") and sources.is_url("memory://a")
    assert not sources.is_url("/tmp/run") and not sources.is_url("C:\\runs\\x") and not sources.is_url("run/s3:")


def test_listing_folder_and_single_file(store):
    files = sources.list_files(store)
    names = [f.name for f in files]
    assert [f.url for f in files] == sorted(f.url for f in files) and "node0.json" in names and "train.log" in names
    assert not any(f.given for f in files)
    one = sources.list_files(files[0].url)
    assert len(one) == 1 and one[0].given and one[0].url == files[0].url and one[0].size == files[0].size
    assert pickle.loads(pickle.dumps(one[0])) == one[0]  # travels to a worker as is


def test_discovery_keeps_only_traces(store):
    disc = discover([store])
    assert disc.ranks == [0, 1]
    names = sorted(f.path.name for r in disc.ranks for f in disc.by_rank[r])
    assert names == sorted(p.name for p in SAMPLE.iterdir())
    assert all(isinstance(f.path, sources.RemoteFile) for r in disc.ranks for f in disc.by_rank[r])


def test_remote_decode_equals_local(store):
    disc = discover([store])
    for rank in disc.ranks:
        remote = disc.by_rank[rank][0]
        local = load_rank_trace(SAMPLE / remote.path.name, rank)
        there = load_rank_trace(remote.path, rank)
        assert there.path == remote.path.url
        assert (there.n_events, there.steps, there.world_size) == (local.n_events, local.steps, local.world_size)
        assert there.gpu.start.tolist() == local.gpu.start.tolist()
        assert there.host_ops.start.tolist() == local.host_ops.start.tolist()


def test_file_url_analyzes_like_the_path():
    a = analyze([str(SAMPLE)])
    b = analyze([SAMPLE.as_uri()])
    assert b.inputs == [SAMPLE.as_uri()]
    assert [s.values for s in a.summaries] == [s.values for s in b.summaries]


def test_size_limit_applies_to_urls(store, monkeypatch):
    monkeypatch.setenv("DDPDOCTOR_MAX_TRACE_BYTES", "1K")
    f = next(f for f in sources.list_files(store) if f.name.startswith("rank0"))
    with pytest.raises(InputError, match="larger than the limit of 1024 bytes"):
        load_rank_trace(f, 0)


def test_missing_url_is_bad_input(store):
    with pytest.raises(InputError, match="no such file or directory"):
        discover([store + "/nothing-here"])


def test_local_paths_never_go_through_fsspec(monkeypatch):
    def no(*_a, **_k):
        raise AssertionError("a local path went through sources.py")

    for name in ("filesystem", "list_files", "read_range", "read_capped"):
        monkeypatch.setattr(sources, name, no)
    assert analyze([str(SAMPLE)]).summaries
