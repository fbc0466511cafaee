"""Catalogue entries for failures of the host rather than the job's communication: torch's CPU allocator
refusing an allocation (rules/messages/cpu_memory.toml: a wrong size versus the host out of RAM) and a CUDA call
on a torch build or a host without CUDA (rules/messages/cuda_unavailable.toml); and the place of the root-cause
exception in the user's own code (failure.exception.where / .code, logs/exception_place.py) that their fixes name."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.logs import analyze_logs
from ddpdoctor.logs.exception_place import _own_frame
from ddpdoctor.rules_engine.facts import merge_facts
from ddpdoctor.rules_engine.registry import build_ruleset
from ddpdoctor.rules_engine.verdict import diagnose


def _top(tmp_path: Path, files: dict[str, str], known: dict | None = None):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    known = known or {}
    la = analyze_logs([str(tmp_path)], known_facts=known)
    facts = merge_facts(known, la.facts)
    findings = diagnose(facts, build_ruleset(), log_search=la.search).findings
    return la.facts, findings[0]


def _alloc_traceback(rank: int, message: str) -> str:
    """A collate that allocates the padded batch, inside the DataLoader's __next__ (wrapped by the capture agent)."""
    p = f"[rank{rank}]: "
    return "".join(
        p + ln + "\n"
        for ln in [
            "Traceback (most recent call last):",
            '  File "/home/me/train.py", line 130, in main',
            "    for x, y in loader:",
            '  File "/tmp/ddpdoctor-run-x/inject/ddpdoctor_capture_agent/patches.py", line 123, in wrapper',
            "    result = orig(*a, **k)",
            '  File "/usr/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 57, in fetch',
            "    return self.collate_fn(data)",
            '  File "/home/me/train.py", line 89, in __call__',
            "    batch = torch.zeros(len(samples), self.max_len, dtype=torch.long)",
            "            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            message,
        ]
    )


PEER_LOST = (
    "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:26496\n"
)


def test_a_terabyte_cpu_allocation_is_a_wrong_size_at_the_users_line(tmp_path):
    msg = (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 12800000000000 bytes. Error code 12 (Cannot allocate memory)"
    )
    facts, top = _top(tmp_path, {"rank1.log": _alloc_traceback(1, msg), "rank0.log": PEER_LOST})
    assert facts["failure.message.id"] == "cpu.alloc_impossible_size" and facts["failure.message.kind"] == "data"
    assert facts["failure.exception.where"] == "/home/me/train.py:89"
    assert facts["failure.exception.code"] == "batch = torch.zeros(len(samples), self.max_len, dtype=torch.long)"
    assert top.rule == "FL010" and top.ranks == [1]
    first = top.fixes[0]
    assert "memory" in first.title and "12.8 TB" in first.title and "wrong" in first.title
    assert "/home/me/train.py:89: `batch = torch.zeros(" in first.change
    assert "will not fix it" in first.change and "free -g" not in first.change


def test_an_ordinary_cpu_allocation_that_failed_is_the_host_out_of_ram(tmp_path):
    msg = (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough memory: "
        "you tried to allocate 6383992832 bytes."
    )
    facts, top = _top(tmp_path, {"rank1.log": _alloc_traceback(1, msg)}, {"host.local_world_size": 8})
    assert facts["failure.message.id"] == "cpu.out_of_memory" and facts["failure.message.kind"] == "resources"
    first = top.fixes[0]
    assert "6.4 GB" in first.title and "ran out of memory" in first.title and "wrong" not in first.title
    assert "/home/me/train.py:89" in first.change and "8 ranks on the host" in first.change
    assert "batch size" in first.change and "num_workers" in first.change and "free -g" in first.change


def test_an_allocation_beyond_the_hosts_whole_ram_is_a_wrong_size(tmp_path):
    msg = (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 40000000000 bytes. Error code 12 (Cannot allocate memory)"
    )
    known = {"host.memory_bytes": 25276502016, "host.local_world_size": 2}
    facts, top = _top(tmp_path, {"rank1.log": _alloc_traceback(1, msg), "rank0.log": PEER_LOST}, known)
    assert facts["failure.message.id"] == "cpu.out_of_memory"
    first = top.fixes[0]
    assert "40.0 GB is more than this host's whole RAM (25.3 GB): the size is wrong" in first.title, first.title
    assert "will not fix it" in first.change and "free -g" not in first.change
    # the same allocation on a host with more RAM than that: the host ran out
    _, top = _top(tmp_path, {}, {"host.memory_bytes": 256_000_000_000, "host.local_world_size": 2})
    assert "ran out of memory" in top.fixes[0].title


def test_a_negative_size_taken_as_unsigned_is_a_wrong_size(tmp_path):
    line = (
        "[rank0]: RuntimeError: [enforce fail at alloc_cpu.cpp:116] ((ptrdiff_t)nbytes) >= 0. alloc_cpu() seems to "
        "have been called with negative number: 18446744073709551608\n"
    )
    facts, top = _top(tmp_path, {"rank0.log": line})
    assert facts["failure.message.id"] == "cpu.alloc_impossible_size"
    assert "the size is wrong" in top.fixes[0].title


def _cuda_traceback(rank: int, message: str) -> str:
    p = f"[rank{rank}]: "
    return "".join(
        p + ln + "\n"
        for ln in [
            "Traceback (most recent call last):",
            '  File "/home/me/train.py", line 53, in main',
            "    torch.cuda.set_device(local_rank)",
            '  File "/usr/lib/python3.11/site-packages/torch/cuda/__init__.py", line 689, in set_device',
            "    torch._C._cuda_setDevice(device)",
            message,
        ]
    )


def test_a_cuda_call_on_a_cpu_only_build_on_every_rank(tmp_path):
    msg = "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"
    facts, top = _top(
        tmp_path,
        {"rank0.log": _cuda_traceback(0, msg), "rank1.log": _cuda_traceback(1, msg)},
        {"run.world_size": 2},
    )
    assert facts["failure.exception.shared"] is True and facts["failure.message.id"] == "cuda.torch_cpu_only_build"
    assert top.rule == "FL010" and "Every rank (0, 1) raised the same AttributeError" in top.summary
    first = top.fixes[0]
    assert "CUDA" in first.title and "+cpu" in first.title and "gloo" in first.title
    assert "/home/me/train.py:53: `torch.cuda.set_device(local_rank)`" in first.change
    # the generic fix uses the summary's rank knowledge: every rank, not "the log does not say which"
    generic = next(f for f in top.fixes if f.title.startswith("Fix the AttributeError"))
    assert generic.title == "Fix the AttributeError raised on every rank (0, 1)"
    assert "does not say which" not in generic.change and "one rank only" not in generic.change
    # with the ranks' torch version recorded (settings.json torch_version), the fix quotes it
    _, top = _top(tmp_path, {}, {"run.world_size": 2, "run.torch_version": "2.13.0+cpu"})
    assert top.fixes[0].title.startswith("This torch build (2.13.0+cpu) has no CUDA: install a CUDA build")


def test_each_cuda_unavailable_message_names_its_own_cause(tmp_path):
    cases = {
        "AssertionError: Torch not compiled with CUDA enabled": ("cuda.torch_cpu_only_build", "+cpu"),
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
        "installed a driver from http://www.nvidia.com/Download/index.aspx": ("cuda.no_driver", "No NVIDIA driver"),
        "RuntimeError: No CUDA GPUs are available": ("cuda.no_gpus_visible", "CUDA_VISIBLE_DEVICES"),
        "RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.": (
            "cuda.driver_init_failed",
            "nvidia-smi",
        ),
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update your GPU "
        "driver": ("cuda.torch_driver_too_old", "version 11040"),
    }
    for i, (line, (mid, said)) in enumerate(cases.items()):
        d = tmp_path / str(i)
        d.mkdir()
        facts, top = _top(d, {"rank0.log": _cuda_traceback(0, line)})
        assert facts["failure.message.id"] == mid, line
        assert top.rule == "FL010" and said in top.fixes[0].title, (line, top.fixes[0].title)


def test_the_users_frame_skips_libraries_and_the_capture_agent():
    tb = _alloc_traceback(1, "RuntimeError: boom")
    assert _own_frame(tb) == (
        "/home/me/train.py",
        89,
        "batch = torch.zeros(len(samples), self.max_len, dtype=torch.long)",
    )
    only_libs = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/site-packages/torch/cuda/__init__.py", line 689, in set_device\n'
        "    torch._C._cuda_setDevice(device)\n"
    )
    assert _own_frame(only_libs) is None


def test_no_place_is_named_when_the_traceback_has_no_user_frame(tmp_path):
    line = "[rank0]: RuntimeError: No CUDA GPUs are available\n"
    facts, top = _top(tmp_path, {"rank0.log": line})
    assert "failure.exception.where" not in facts
    assert facts["failure.message.id"] == "cuda.no_gpus_visible" and "nvidia-smi -L" in top.fixes[0].change


def test_an_allocation_in_a_dataloader_worker_is_placed_in_the_workers_traceback(tmp_path):
    """The main process re-raises the worker's error from `for x, y in loader`; the allocation is the worker's."""
    p = "[rank1]: "
    log = "".join(
        p + ln + "\n"
        for ln in [
            "Traceback (most recent call last):",
            '  File "/home/me/train.py", line 130, in main',
            "    for x, y in loader:",
            '  File "/usr/lib/python3.11/site-packages/torch/_utils.py", line 733, in reraise',
            "    raise exception",
            "RuntimeError: Caught RuntimeError in DataLoader worker process 0.",
            "Original Traceback (most recent call last):",
            '  File "/usr/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 57, in fetch',
            "    return self.collate_fn(data)",
            '  File "/home/me/train.py", line 89, in __call__',
            "    batch = torch.zeros(len(samples), self.max_len, dtype=torch.long)",
            "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 12800000000000 bytes. Error code 12 (Cannot allocate memory)",
            '  File "/home/me/other.py", line 7, in later',
        ]
    )
    facts, top = _top(tmp_path, {"rank1.log": log})
    assert facts["failure.message.id"] == "cpu.alloc_impossible_size"
    assert facts["failure.exception.where"] == "/home/me/train.py:89"
    assert "/home/me/train.py:89: `batch = torch.zeros(" in top.fixes[0].change
