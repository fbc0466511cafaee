"""The capture agent's parts without a training run and without torch: the patch table and its one
wrapper (agent/patches.py), the error counts and the event log (agent/log.py), and the agent_errors
record settings.json gets from them."""

import io
import json
import sys
import types
from pathlib import Path

import pytest

from ddpdoctor.capture.agent import core as agent

patches, log = agent._patches, agent._log


@pytest.fixture
def rank(tmp_path):
    a = agent.Agent({"DDPDOCTOR_BUNDLE": str(tmp_path), "RANK": "1", "WORLD_SIZE": "2"})
    (tmp_path / "ranks" / "rank1").mkdir(parents=True)
    a.log.fh = io.StringIO()
    return a


def events(a):
    return [json.loads(line) for line in a.log.fh.getvalue().splitlines()]


# ---------------------------------------------------------------------------- errors and the event log


class Broken:
    def write(self, _line):
        raise OSError(28, "No space left on device")

    def flush(self):
        pass


def test_a_failing_event_log_is_counted_in_settings(rank):
    rank.log.fh = Broken()
    rank.event("step", step=0)
    rank.event("step", step=1)
    rank.settings.write(lite=True)  # the signal watcher's copy: no torch needed
    with open(f"{rank.dir}/settings.json", encoding="utf-8") as fh:
        written = json.load(fh)
    assert written["agent_errors"] == [
        {
            "place": "event log",
            "type": "OSError",
            "count": 2,
            "first_message": "[Errno 28] No space left on device",
            "first_time": written["agent_errors"][0]["first_time"],
        }
    ]


def test_a_plain_run_records_no_agent_errors(rank):
    rank.event("start")
    assert rank.settings.collect(lite=True)["agent_errors"] == [] and events(rank)[0]["kind"] == "start"


def test_internal_errors_are_events_and_counts(rank):
    for i in range(3):
        rank.internal_error("dataloader settings", KeyError(f"k{i}"))
    rank.internal_error("dataloader settings", TypeError("t"))
    assert [e["kind"] for e in events(rank)] == ["ddpdoctor_error"] * 4
    rec = {(r["place"], r["type"]): r for r in rank.errors.record()}
    assert rec[("dataloader settings", "KeyError")]["count"] == 3
    assert rec[("dataloader settings", "KeyError")]["first_message"] == "'k0'"
    assert rec[("dataloader settings", "TypeError")]["count"] == 1 and rank.errors.total() == 4


def test_quiet_counts_exceptions_and_lets_exit_through():
    errors = log.ErrorCounter()
    with errors.quiet("flushing stdout"):
        raise ValueError("closed file")
    with pytest.raises(SystemExit):
        with errors.quiet("x"):
            raise SystemExit(0)
    with pytest.raises(KeyboardInterrupt):
        with errors.quiet("x"):
            raise KeyboardInterrupt
    assert [(r["place"], r["type"], r["count"]) for r in errors.record()] == [("flushing stdout", "ValueError", 1)]


def test_error_places_are_bounded():
    errors = log.ErrorCounter()
    for i in range(log.MAX_PLACES + 10):
        errors.count(f"place {i}", RuntimeError("x"))
    rec = errors.record()
    assert len(rec) == log.MAX_PLACES + 1 and rec[-1]["place"] == log.OTHER and rec[-1]["count"] == 10


def test_a_forked_child_writes_no_event():
    errors = log.ErrorCounter()
    el = log.EventLog(rank=0, pid=-1, errors=errors)  # opened by another process
    el.fh = io.StringIO()
    el.write("step", {})
    assert el.fh.getvalue() == "" and errors.total() == 0


# ---------------------------------------------------------------------------- the wrapper


class Loader:
    """Doc of the loader."""

    def __init__(self, n):
        self.n = n

    def next(self, k=1):
        if self.n <= 0:
            raise StopIteration
        self.n -= k
        return self.n


def test_wrap_runs_hooks_around_the_original_and_keeps_its_face():
    seen, errors = [], []
    orig = Loader.next
    try:
        w = patches.wrap(
            Loader,
            "next",
            args=lambda o, a, k: (a, {"k": 2}),
            before=lambda it, **k: seen.append(("before", it.n, k)),
            after=lambda res, it, **k: seen.append(("after", res)),
            on_error=lambda place, exc: errors.append(place),
            place="Loader.next",
        )
        assert w is Loader.next and Loader.next.__wrapped__ is orig and Loader.next.__name__ == "next"
        it = Loader(5)
        assert it.next() == 3  # the changed argument reached the original
        assert seen == [("before", 5, {"k": 2}), ("after", 3)] and errors == []
        assert patches.wrap(Loader, "next", on_error=None) is None and Loader.next is w  # not twice
        it.n = 0
        with pytest.raises(StopIteration):  # the original's own exceptions pass unchanged
            it.next()
    finally:
        Loader.next = orig


def test_hook_failures_are_reported_never_raised_but_exit_passes():
    errors, calls = [], []
    orig = Loader.__init__

    def bad(*a, **k):
        raise RuntimeError("capture bug")

    def stop(*a, **k):
        raise SystemExit(0)

    try:
        patches.wrap(
            Loader,
            "__init__",
            args=bad,
            before=bad,
            after=bad,
            on_error=lambda place, exc: errors.append((place, type(exc).__name__)),
            place="Loader.__init__",
        )
        assert Loader(3).n == 3
        assert errors == [
            ("Loader.__init__ arguments", "RuntimeError"),
            ("Loader.__init__ before", "RuntimeError"),
            ("Loader.__init__ after", "RuntimeError"),
        ]
        Loader.__init__ = orig
        patches.wrap(Loader, "__init__", before=stop, after=lambda *a: calls.append(a), on_error=None)
        with pytest.raises(SystemExit):  # the agent ending the rank after its window
            Loader(3)
        assert calls == []
    finally:
        Loader.__init__ = orig


class Span:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")

    def __exit__(self, *exc):
        self.log.append("exit")


def test_around_runs_the_call_inside_the_span_even_when_it_raises():
    log, errors = [], []
    orig = Loader.next
    try:
        patches.wrap(
            Loader,
            "next",
            around=lambda it, **k: Span(log),
            after=lambda res, it, **k: log.append(("after", res)),
            on_error=lambda place, exc: errors.append(place),
            place="Loader.next",
        )
        it = Loader(5)
        assert it.next() == 4 and log == ["enter", "exit", ("after", 4)]
        it.n, log[:] = 0, []
        with pytest.raises(StopIteration):  # the span is closed, the exception passes unchanged
            it.next()
        assert log == ["enter", "exit"] and errors == []
        Loader.next = orig
        patches.wrap(Loader, "next", around=lambda it, **k: None, on_error=None)  # no span (window not recording)
        assert Loader(5).next() == 4
        Loader.next = orig

        def broken(*a, **k):
            raise RuntimeError("capture bug")

        patches.wrap(Loader, "next", around=broken, on_error=lambda place, exc: errors.append(place), place="L")
        assert Loader(5).next() == 4 and errors == ["L around"]  # the call goes on outside the span
    finally:
        Loader.next = orig


def test_the_loader_iter_span_only_while_the_window_records(rank):
    assert rank.loader_iter_span(object()) is None  # no profiler running
    spans = []
    rank.torch = types.SimpleNamespace(profiler=types.SimpleNamespace(record_function=lambda n: spans.append(n) or n))
    rank.profiler.prof = object()
    assert rank.loader_iter_span(object()) == "enumerate(DataLoader)#DataLoader.__iter__"
    from ddpdoctor.trace.classify import is_dataloader

    assert is_dataloader(spans[0])  # analysis counts it as DataLoader wait


# ---------------------------------------------------------------------------- the table

HOOK_FIELDS = ("before", "after", "args", "around", "register", "on_import", "when")


def test_every_hook_the_table_names_exists_on_the_agent(rank):
    # the DataLoader worker's loop runs in a forked child, whose hooks go to a join.Pending with the worker probe
    from ddpdoctor.capture.agent import join as _join
    from ddpdoctor.capture.agent import loader_workers as _loader_workers

    worker = _join.Pending(lambda _a, _k: None, _loader_workers.WorkerProbe("/nowhere", env={}).worker_args)
    for p in patches.PATCHES:
        target = worker if p.module == "torch.utils.data._utils.worker" else rank
        for field in HOOK_FIELDS:
            name = getattr(p, field)
            if name:
                assert callable(patches.resolve(target, name)), (p, field)


def test_docs_bundle_lists_every_patch_of_the_table():
    text = (Path(__file__).resolve().parents[2] / "docs" / "BUNDLE.md").read_text()
    start = text.index("- Patches (class level")
    listed = text[start : text.index("\n- ", start + 1)]
    for p in patches.PATCHES:
        if p.target:
            assert f"`{p.target}`" in listed or f"`torch.{p.target}`" in listed, p.target


def _sampler_module():
    class DistributedSampler:
        def set_epoch(self, epoch):
            self.epoch = epoch

    return types.SimpleNamespace(DistributedSampler=DistributedSampler)


def test_apply_patches_one_module_from_the_table(rank):
    mod = _sampler_module()
    patches.apply(rank, "torch.utils.data.distributed", mod)
    s = mod.DistributedSampler()
    assert not rank.settings.set_epoch_called
    s.set_epoch(3)
    assert s.epoch == 3 and rank.settings.set_epoch_called


def test_optional_targets_missing_from_torch_are_skipped_quietly(rank):
    fake_torch = types.SimpleNamespace()  # an old torch: no OutOfMemoryError, no compile
    patches.apply(rank, "torch", fake_torch)
    assert rank.torch is fake_torch and rank.errors.total() == 0 and events(rank) == []


def test_a_required_target_missing_is_reported_and_the_rest_applied(rank):
    mod = types.SimpleNamespace(
        DataLoader=type("DataLoader", (), {"__iter__": lambda self: iter(())})
    )  # no _BaseDataLoaderIter
    patches.apply(rank, "torch.utils.data.dataloader", mod)
    places = [r["place"] for r in rank.errors.record()]
    assert places == [
        "patching torch.utils.data.dataloader _BaseDataLoaderIter.__init__",
        "patching torch.utils.data.dataloader _BaseDataLoaderIter.__next__",
    ]
    assert [e["kind"] for e in events(rank)] == ["ddpdoctor_error", "ddpdoctor_error"]


def test_dataloader_construction_is_patched_only_for_a_dataloader_try(tmp_path):
    base = {"DDPDOCTOR_BUNDLE": str(tmp_path), "RANK": "0"}

    def init_of(env):
        class DataLoader:
            def __init__(self, dataset, num_workers=0):
                self.num_workers = num_workers

        a = agent.Agent(env)
        patches.apply(
            a,
            "torch.utils.data.dataloader",
            types.SimpleNamespace(
                DataLoader=DataLoader,
                _BaseDataLoaderIter=type("It", (), {"__init__": lambda s, loader: None, "__next__": lambda s: 1}),
            ),
        )
        return DataLoader, a

    plain, _ = init_of(base)
    assert not getattr(plain.__init__, "_ddpdoctor", False)
    tried, a = init_of({**base, "DDPDOCTOR_TRY": json.dumps({"dataloader.num_workers": 4})})
    assert tried.__init__._ddpdoctor and tried([1, 2], 0).num_workers == 4
    assert a.trial["applied"]["dataloader.num_workers"] == {"from": 0, "to": 4}


def test_an_oom_names_the_line_that_raised_it(rank):
    class OutOfMemoryError(RuntimeError):
        pass

    patches.wrap(OutOfMemoryError, "__init__", after=rank.settings.oom_created, on_error=rank.internal_error)
    try:
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    except OutOfMemoryError:
        line = sys._getframe().f_lineno - 2
    (oom,) = events(rank)
    assert oom["kind"] == "oom" and oom["message"].startswith("CUDA out of memory") and rank.settings.ooms == 1
    assert oom["where"] == f"{__file__}:{line} in test_an_oom_names_the_line_that_raised_it"


def test_post_import_hook_runs_after_the_module_executed(tmp_path, monkeypatch):
    (tmp_path / "ddpd_fake_torch_part.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    finder = patches.PostImportFinder({"ddpd_fake_torch_part"}, lambda name, mod: seen.append((name, mod.VALUE)))
    sys.meta_path.insert(0, finder)
    try:
        import ddpd_fake_torch_part  # noqa: F401
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("ddpd_fake_torch_part", None)
    assert seen == [("ddpd_fake_torch_part", 42)]


def test_wrapper_keeps_attributes_hung_on_the_function():
    """torch 2.13's fully_shard has a `.state` attribute; scripts call fully_shard.state(module)."""
    import types

    from ddpdoctor.capture.agent.patches import wrap

    def fully_shard(module):
        return module

    fully_shard.state = lambda m: "state"
    owner = types.SimpleNamespace(fully_shard=fully_shard)
    wrap(owner, "fully_shard", on_error=lambda *a: None)
    assert owner.fully_shard is not fully_shard and owner.fully_shard.state(None) == "state"
