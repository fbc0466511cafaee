"""The terminal card and the full view (#14), from diagnosis dicts built in code, plus the CLI
paths that read them: `report --format terminal`, `-v`, the failed-run exit code."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddpdoctor.report import view
from ddpdoctor.report.card import partial_reasons, render_card
from ddpdoctor.report.terminal import render_full
from ddpdoctor.text import block, shell, wrap
from ddpdoctor.trial.predict import annotate

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"


def _finding(rule, category, title, summary, fixes=(), cost=None, ranks=(0, 1), evidence=None):
    return {
        "rule": rule,
        "category": category,
        "title": title,
        "summary": summary,
        "ranks": list(ranks),
        "cost": cost,
        "evidence": evidence or {},
        "fixes": list(fixes),
        "severity": "high",
        "expected_speedup": None if cost is None else 1 / (1 - cost),
    }


def _rank(step_us, share):
    return {
        "steps": 5,
        "mean_us": {"step_time": step_us, **{k: v * step_us for k, v in share.items()}},
        "share": {"step_time": 1.0, **share},
        "device_kind": "gpu",
        "backend": "nccl",
        "notes": [],
    }


def _doc(**kw):
    share = {"compute": 0.5, "comm_exposed": 0.3, "comm_sync_wait": 0.25, "dataloader_wait": 0.1, "other": 0.1}
    d = {
        "schema": "ddpdoctor.diagnosis/1",
        "inputs": ["runs/a"],
        "partial": False,
        "warnings": [],
        "verdict": {
            "bottleneck": "communication",
            "label": "communication-bound",
            "confidence": 0.8,
            "confidence_label": "high",
            "expected_speedup": 1.43,
            "rule": "CM001",
            "failed": False,
            "summary": "communication-bound: Communication that no compute overlaps takes 30 % of the step.",
            "confidence_hints": [],
        },
        "costs": [
            {
                "rule": "CM001",
                "category": "communication",
                "label": "communication-bound",
                "cost": 0.3,
                "material": True,
                "eligible": True,
                "why_not": None,
            }
        ],
        "findings": [
            _finding(
                "CM001",
                "communication",
                "Gradient communication is not hidden",
                "Communication that no compute overlaps takes 30 % of the step.",
                cost=0.3,
                fixes=[
                    {
                        "title": "Use 100 MB buckets",
                        "kind": "code",
                        "knob": "ddp.bucket_cap_mb",
                        "value": 100,
                        "not_recorded": [],
                        "change": "- DistributedDataParallel(model)\n"
                        "+ DistributedDataParallel(model, bucket_cap_mb=100)",
                    }
                ],
            ),
            _finding("DL002", "dataloader", "Pageable host-to-device copies", "2 % of the step.", cost=0.02),
        ],
        "abstained": [],
        "not_assessed": [],
        "rule_errors": [],
        "facts": {"run.command": "torchrun --nproc_per_node=2 train.py", "run.status": "complete"},
        "analysis": {
            "world_size": 2,
            "ranks_present": [0, 1],
            "partition": {"gpu": ["compute", "comm_exposed", "memcpy", "dataloader_wait", "host_idle", "other"]},
            "ranks": {"0": _rank(100_000, share), "1": _rank(104_000, share)},
            "cross_rank": {"stragglers": [], "notes": []},
        },
    }
    d.update(kw)
    return annotate(d)  # as report/json_report.to_dict builds it: each tryable fix with its prediction


def test_card_puts_the_verdict_first_and_a_try_command_next():
    lines = render_card(_doc())
    assert lines[0] == "Verdict: communication-bound — confidence high (0.80)"
    assert lines[1].startswith("  Communication that no compute overlaps")  # the label is not repeated
    text = "\n".join(lines)
    assert "step time   102.0 ms median over 2 ranks, 5 steps each" in text
    assert "cost        30 % of each step — up to 1.43x faster without it" in text
    assert (
        "Fix first [CM001]: Use 100 MB buckets" in text
        and "+ DistributedDataParallel(model, bucket_cap_mb=100)" in text
    )
    assert "Next: ddpdoctor run --try CM001 -- torchrun --nproc_per_node=2 train.py" in text
    assert "  [DL002] Pageable host-to-device copies — 2 % of the step" in text
    assert text.count("Communication that no compute overlaps") == 1  # the verdict is not repeated as a finding
    assert max(map(len, lines)) <= 80


def test_a_code_fix_points_to_the_report_and_to_compare():
    d = _doc()
    d["findings"][0]["fixes"][0].update(knob=None, value=None)
    text = "\n".join(render_card(d))
    assert "Next: ddpdoctor analyze runs/a --report report-a" in text
    assert "ddpdoctor compare runs/a after" in text and "--try" not in text


def test_failed_run_card_names_the_first_error_not_a_confidence_hint():
    d = _doc()
    d["verdict"].update(failed=True, confidence_hints=["step times vary by 105%"])
    d["findings"].insert(
        0,
        _finding(
            "FL001",
            "failure",
            "A rank ran out of GPU memory",
            "Rank 1 ran out of CUDA memory.",
            ranks=[1],
            fixes=[{"title": "Lower the peak memory of rank 1", "change": "- Reduce the batch size.", "kind": "code"}],
        ),
    )
    d["facts"].update(
        {
            "run.exit_code": 1,
            "run.status": "failed",
            "run.first_problem": {"rank": 1, "type": "OutOfMemoryError", "step": 4, "time": 0.0},
        }
    )
    lines = render_card(d)
    text = "\n".join(lines)
    assert lines[0] == "Verdict: the run failed: A rank ran out of GPU memory"
    assert "first error rank 1: OutOfMemoryError, step 4 at 00:00:00 UTC" in text
    assert "exit code   1" in text and "recorded    communication-bound (high 0.80)" in text
    assert "Fix first [FL001]: Lower the peak memory of rank 1" in text
    assert "105%" not in text and "--try" not in text


def test_partial_is_said_with_its_reason():
    d = _doc(partial=True)
    d["analysis"]["world_size"] = 8
    assert partial_reasons(d) == ["traces from 2 of 8 ranks (missing: 2-7)"]
    assert "  partial:    traces from 2 of 8 ranks (missing: 2-7)" in render_card(d)
    logs_only = _doc(analysis=None)
    assert "no profiler traces: performance not assessed, logs only" in "\n".join(render_card(logs_only))


def test_no_dominant_cost_offers_a_look_not_a_first_fix():
    d = _doc()
    d["verdict"] = {
        "bottleneck": None,
        "label": "no dominant avoidable cost",
        "confidence": None,
        "rule": None,
        "failed": False,
        "summary": "no dominant avoidable cost: what the rules found stays small",
    }
    text = "\n".join(render_card(d))
    assert text.startswith("Verdict: no dominant avoidable cost\n")
    assert "Worth a look [CM001]" in text and "Fix first" not in text


def test_full_view_starts_with_the_card_and_splits_sync_wait_from_transfer():
    lines = render_full(_doc())
    text = "\n".join(lines)
    assert text.startswith("\n".join(render_card(_doc(), verbose_hint=False)))
    assert "Every finding" in text and "2. [DL002]" in text
    head = next(ln for ln in lines if ln.lstrip().startswith("rank steps"))
    assert "comm" in head and "sync wait" in head
    row0 = lines[lines.index(head) + 1].split()
    # exposed 30 % = 5 % transfer + 25 % waiting for a late peer, shown apart
    assert row0[:5] == ["0", "5", "100.00", "50.0%", "5.0%"] and row0[5] == "25.0%"


def test_segment_and_partition_split_the_wait_out_of_exposed_communication():
    d = _doc()
    row = d["analysis"]["ranks"]["0"]
    assert view.segment(row, "comm_exposed", "share") == pytest.approx(0.05)
    assert view.segment(row, "comm_sync_wait", "share") == pytest.approx(0.25)
    assert "comm_sync_wait" in view.partition(d)
    row["share"]["comm_sync_wait"] = 0.6  # more wait than exposed time (GPU: overlapped) is capped
    assert view.segment(row, "comm_exposed", "share") == 0.0


def test_evidence_in_words():
    items = view.evidence_items(
        {
            "late_rank": 1,
            "where": "other",
            "extra_us": 39653.0,
            "wait_share": 0.4,
            "bandwidth_bound": False,  # a rule's own decision, not a measurement: not listed (issue 41)
            "oom_ranks": [1, 3],
        }
    )
    assert items == [
        "late rank 1",
        "where: work outside any traced operator",
        "extra 39.7 ms",
        "wait 40 %",
        "oom ranks 1, 3",
    ]


def test_log_events_in_time_order_across_ranks():
    d = {
        "logs": {
            "events": [
                {"rank": 0, "kind": "progress", "time": 100.0, "file": "r0.log", "line_no": 1},
                {"rank": 0, "kind": "exit", "time": None, "file": "r0.log", "line_no": 9},  # after t=112 in its file
                {"rank": 0, "kind": "progress", "time": 112.0, "file": "r0.log", "line_no": 5},
                {"rank": 1, "kind": "oom", "time": 110.0, "file": "r1.log", "line_no": 40},
            ]
        }
    }
    timed, complete = view.timed_events(d)
    assert complete and [e["kind"] for _, e in timed] == ["progress", "oom", "progress", "exit"]
    assert [e["kind"] for e in view.ordered_events(d)] == ["oom", "exit"]
    d["logs"]["events"][3]["time"] = None  # rank 1's log has no timestamp at all: no shared time axis
    assert view.timed_events(d)[1] is False
    assert [e["rank"] for e in view.ordered_events(d)] == [0, 1]
    # ... unless the same error of the same rank is timed in another of its files (events.jsonl
    # beside an untimestamped output.log): it takes that time
    d["logs"]["events"][3]["text"] = "CUDA out of memory"
    d["logs"]["events"].append(
        {"rank": 1, "kind": "oom", "time": 111.0, "file": "r1/events.jsonl", "line_no": 2, "text": "CUDA out of memory"}
    )
    timed, complete = view.timed_events(d)
    assert complete and [(t, e["rank"], e["kind"]) for t, e in timed if e["kind"] != "progress"] == [
        (111.0, 1, "oom"),
        (111.0, 1, "oom"),
        (112.0, 0, "exit"),
    ]
    d["logs"]["events"][-1]["rank"] = 0  # the same text on another rank is another error
    assert view.timed_events(d)[1] is False


def test_failed_sample_lists_its_events_in_time_order_in_plain_words():
    """The OOM sample's rank 0 error is in its untimestamped output.log too: it takes the time of the same
    error in rank 0's events.jsonl, so the report's table (and plot) keep one time order across ranks:
    rank 1's OOM first, though rank 0's files come first by name."""
    res = _cli("analyze", SAMPLES / "capture_gloo_2ranks_oom_skip_batch", "--format", "md", "--hta", "off")
    assert res.returncode == 3, res.stderr
    table = res.stdout[res.stdout.index("## Log events") :]
    table = table[: table.index("</details>")]
    rows = [ln.split("|")[1:3] for ln in table.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    kinds = [(r.strip(), k.strip()) for r, k in rows]
    assert kinds[0] == ("1", "out of memory"), kinds
    assert ("0", "peer error") in kinds and ("0", "torchrun's root cause") in kinds
    assert not any("_" in k for _, k in kinds), kinds


def test_text_layout():
    assert wrap("a " * 50, 20, "Next: ", "  ")[1].startswith("  a") and max(map(len, wrap("a " * 50, 20))) <= 20
    change = (
        "Prose that is long enough to wrap around at the given width of forty.\n"
        "+ model = DDP(model, bucket_cap_mb=100, gradient_as_bucket_view=True)\n"
        "# a comment long enough to be wrapped as a comment again"
    )
    body = block(change, 40)
    assert body[0] == "  Prose that is long enough to wrap"
    assert "  + model = DDP(model, bucket_cap_mb=100, gradient_as_bucket_view=True)" in body  # code as written
    assert body[-2:] == ["  # a comment long enough to be wrapped", "  # as a comment again"]
    assert block(change, 40, cut_code=True)[2] == "  + model = DDP(model, bucket_cap_mb=10…"  # the card's cut
    bullets = block("- first bullet that is long enough to wrap too, it keeps its indent\n- second", 40)
    assert bullets[0].startswith("  - first") and bullets[1].startswith("    ") and bullets[-1] == "  - second"
    cmd = shell("ddpdoctor run --try CM001 -- torchrun --nproc_per_node=8 train.py --config a/very/long.yaml", 40)
    assert all(ln.endswith(" \\") for ln in cmd[:-1]) and not cmd[-1].endswith("\\")
    assert (
        " ".join(ln.rstrip(" \\").strip() for ln in cmd).split()
        == "ddpdoctor run --try CM001 -- torchrun --nproc_per_node=8 train.py --config a/very/long.yaml".split()
    )


def test_plain_drops_pictographs():
    assert view.plain("Check the logs of the remote worker. GLHF! 🏖️") == "Check the logs of the remote worker. GLHF!"
    assert view.plain("µs → ms, 95 %") == "µs → ms, 95 %"


def _cli(*args, **kw):
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "ddpdoctor", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env=env,
        **kw,
    )


def test_report_terminal_renders_what_analyze_printed(tmp_path):
    sample = SAMPLES / "capture_gloo_2ranks_slow_loader"
    live = _cli("analyze", sample, "--json", tmp_path / "d.json", "--hta", "off")
    assert live.returncode == 0, live.stderr
    again = _cli("report", tmp_path / "d.json", "--format", "terminal")
    assert again.returncode == 0 and again.stdout == live.stdout.split("JSON written to")[0]
    full = _cli("report", tmp_path / "d.json", "--format", "terminal", "-v")
    assert "Every finding" in full.stdout and "Per rank:" in full.stdout


def test_a_failed_run_exits_3_and_its_card_says_so():
    res = _cli("analyze", SAMPLES / "capture_gloo_2ranks_oom_skip_batch", "--hta", "off")
    assert res.returncode == 3 and res.stderr == ""
    lines = res.stdout.splitlines()
    assert lines[0].startswith("Verdict: the run failed: A rank ran out of GPU memory")
    assert len(lines) <= 30 and max(map(len, lines)) <= 80
    d = json.loads(_cli("analyze", SAMPLES / "capture_gloo_2ranks_oom_skip_batch", "--format", "json").stdout)
    assert d["verdict"]["failed"] is True


def test_rules_explain_shows_placeholders_not_code():
    res = _cli("rules", "explain", "DL001", "--no-config")
    assert res.returncode == 0
    fixes = res.stdout.split("Fixes (")[1].split("References:")[0]
    kept, in_condition = [], False  # conditions ([if …], maybe wrapped) are the rule's own code
    for ln in fixes.splitlines():
        in_condition = in_condition or ln.lstrip().startswith("[if ")
        if not in_condition:
            kept.append(ln)
        in_condition = in_condition and not ln.endswith("]")
    body = "\n".join(kept)
    assert "{" not in body and "default(" not in body and "plural(" not in body
    assert "num_workers=<workers>" in body and "Only <cpus> CPUs per rank" in body


def test_a_comment_written_over_several_lines_is_rewrapped_as_one():
    change = (
        "+ model = DistributedDataParallel(torch.compile(model), ...)\n"
        "# fuses elementwise kernels and cuts launch overhead; DDP's optimizer splits graphs at bucket\n"
        "# boundaries so communication still overlaps\n"
    )
    lines = block(change, width=80)
    comment = [x for x in lines if x.lstrip().startswith("#")]
    assert all(len(x) <= 80 for x in lines[1:])
    # no orphan fragment: every comment line but the last is filled close to the width
    assert all(len(x) > 60 for x in comment[:-1]), comment
    assert " ".join(x.strip()[2:] for x in comment).endswith("at bucket boundaries so communication still overlaps")
    # short comment lines stay as written
    assert block("+ x = 1\n# one\n# two\n", width=80) == ["  + x = 1", "  # one", "  # two"]


def test_a_backticked_command_that_fits_is_not_split_across_lines():
    text = "after the fix: `ddpdoctor run --out after -- …`, `ddpdoctor compare before after` then compare"
    lines = wrap(text, 40, "      ")
    joined = "\n".join(lines)
    assert "`ddpdoctor compare before after`" in joined and "`ddpdoctor run --out after -- …`" in joined
    assert all(len(x) <= 40 for x in lines)
    # a command longer than a line still wraps (never wider than the width)
    long = wrap("see `ddpdoctor compare /a/very/long/path/that/goes/on/and/on after` here", 40, "  ")
    assert all(len(x) <= 40 for x in long)


def test_the_try_line_follows_what_the_analysis_stored_not_the_renderers_thresholds():
    """Renderers read no threshold (issue 40): the analysis stores ``worth_a_trial`` with its own [trial]
    min_predicted_speedup (an override of it included) and the card follows the document; a report.json
    written before the field existed gets it where it is read back, from the shipped threshold."""
    from ddpdoctor.report.files import _upgrade

    shipped = _doc()
    fix = shipped["findings"][0]["fixes"][0]
    assert fix["predicted_speedup"] > 1.05 and fix["worth_a_trial"] is True
    assert "ddpdoctor run --try CM001" in "\n".join(render_card(shipped))
    strict = annotate(_doc(), {"trial": {"min_predicted_speedup": 2.0}})  # the analysis's override
    assert strict["findings"][0]["fixes"][0]["worth_a_trial"] is False
    assert "--try" not in "\n".join(render_card(strict))
    old = _doc()
    del old["findings"][0]["fixes"][0]["worth_a_trial"]
    assert "--try" not in "\n".join(render_card(old))  # the card decides nothing itself
    _upgrade(old)
    assert "ddpdoctor run --try CM001" in "\n".join(render_card(old))
