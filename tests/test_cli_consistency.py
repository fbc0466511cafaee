"""The commands agree (issue 41, item 7): an option two commands share has one name, default, type and help;
every command that analyzes a run takes the same analysis options; `--format` uses one vocabulary; `-V`
prints the version; the default output folders are ignored by git. Read off the click command objects, so a
new command or option that drifts fails here."""

import fnmatch
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ddpdoctor.capture.host.launcher import default_out_dir
from ddpdoctor.cli import main
from ddpdoctor.cli.options import FORMAT_ALIASES, FORMATS, FormatChoice, default_folder
from ddpdoctor.version import __version__

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "synthetic_gpu_4ranks_dataloader_bound"


def _commands() -> dict[str, click.Command]:
    """Every command by its full name ("analyze", "rules list", …)."""
    out = {}
    for name, cmd in main.commands.items():
        if isinstance(cmd, click.Group):
            out.update({f"{name} {sub}": c for sub, c in cmd.commands.items()})
        else:
            out[name] = cmd
    return out


COMMANDS = _commands()
ANALYZING = ("analyze", "run", "tune", "compare", "bundle")  # may analyze a run: the rules in force
RULE_READING = ANALYZING + ("rules list", "rules explain", "rules test")
# whose output can show the HTA cross-check (compare shows none: it takes --hta, hidden, and ignores it)
HTA_SHOWN = ("analyze", "run", "tune", "bundle")
# option (click parameter name) -> the commands that must have it
SHARED = {
    "rules_dirs": RULE_READING,
    "sets": RULE_READING,
    "no_config": RULE_READING,
    "hta": HTA_SHOWN,
    "quiet": ("analyze", "run", "tune", "compare", "bundle"),
    "verbose": ("analyze", "run", "tune", "report"),
    "json_path": ("analyze", "run", "tune"),
    "report_dir": ("analyze", "run", "tune"),
    "redact_hosts": ("analyze", "report", "bundle"),
    "fmt": ("analyze", "report", "compare"),
    "out": ("run", "tune"),
    "warmup": ("run", "tune"),
    "active": ("run", "tune"),
    "repeat": ("run", "tune"),
}
# the same option, whose help says what it does in that command (name, default and type still agree)
HELP_PER_COMMAND = {"fmt", "out", "warmup", "active", "repeat", "force", "output"}
# options whose default is the command's own (the format each command prints when none is asked for)
DEFAULT_PER_COMMAND = {"fmt", "out"}


def _option(cmd: click.Command, name: str) -> click.Option | None:
    return next((p for p in cmd.params if isinstance(p, click.Option) and p.name == name), None)


def _shape(p: click.Option, with_default: bool) -> tuple:
    t = p.type
    kind = (type(t).__name__, tuple(getattr(t, "choices", ()) or ()))
    if isinstance(t, click.Path):
        kind += (t.file_okay, t.dir_okay)
    if isinstance(t, FormatChoice):
        kind = ("FormatChoice",)  # which formats a command prints is its own; their names are checked below
    return (
        tuple(p.opts),
        tuple(p.secondary_opts),
        p.is_flag,
        p.multiple,
        kind,
        p.default if with_default else None,
    )


@pytest.mark.parametrize("name", sorted(SHARED))
def test_every_command_that_should_have_a_shared_option_has_it_the_same_way(name):
    have = {c: _option(COMMANDS[c], name) for c in SHARED[name]}
    missing = sorted(c for c, p in have.items() if p is None)
    assert not missing, f"{name}: missing in {missing}"
    first, *rest = SHARED[name]
    for c in rest:
        a, b = have[first], have[c]
        assert _shape(a, name not in DEFAULT_PER_COMMAND) == _shape(b, name not in DEFAULT_PER_COMMAND), (name, c)
        if name not in HELP_PER_COMMAND:
            assert a.help == b.help, (name, first, c)


def test_an_option_two_commands_spell_alike_is_the_same_option():
    """Beyond the table: any long option name in two commands has one shape (a new command that copies an
    option and changes its default or type fails here)."""
    seen: dict[str, tuple[str, click.Option]] = {}
    for cname, cmd in sorted(COMMANDS.items()):
        for p in cmd.params:
            if not isinstance(p, click.Option):
                continue
            for flag in p.opts:
                if flag in ("-o", "--output"):  # bundle's archive and report's file: one meaning, own help
                    continue
                if flag in seen:
                    other_cmd, other = seen[flag]
                    keep_default = p.name not in DEFAULT_PER_COMMAND and p.name != "force"
                    assert _shape(other, keep_default) == _shape(p, keep_default), (flag, other_cmd, cname)
                else:
                    seen[flag] = (cname, p)


def test_format_names_are_one_vocabulary_and_old_spellings_still_work():
    fmts = {c: _option(cmd, "fmt") for c, cmd in COMMANDS.items() if _option(cmd, "fmt") is not None}
    assert set(fmts) == set(SHARED["fmt"])
    for c, p in fmts.items():
        assert isinstance(p.type, FormatChoice), c
        assert set(p.type.canonical) <= set(FORMATS), (c, p.type.canonical)
        for alias, canonical in FORMAT_ALIASES.items():
            if canonical in p.type.canonical:
                assert p.type.convert(alias, p, None) == canonical, (c, alias)
        assert "text" not in p.type.canonical and "markdown" not in p.type.canonical, c
    # the card is called "terminal" wherever a command prints it
    assert all("terminal" in fmts[c].type.canonical for c in ("analyze", "report", "compare"))


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flags(flag):
    res = CliRunner().invoke(main, [flag])
    assert res.exit_code == 0 and res.output.strip() == f"ddpdoctor, version {__version__}", res.output


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help_under_both_names(command):
    for flag in ("-h", "--help"):
        res = CliRunner().invoke(main, [*command.split(), flag], prog_name="ddpdoctor")
        assert res.exit_code == 0 and res.output.startswith("Usage: ddpdoctor"), (command, flag, res.output)


def test_default_output_folders_are_ignored_by_git():
    patterns = [
        ln.strip().rstrip("/")
        for ln in (ROOT / ".gitignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    for folder in (default_out_dir(), default_folder("trial"), default_folder("tune")):
        assert any(fnmatch.fnmatch(folder.name, p) for p in patterns), f"{folder} is not in .gitignore"
    assert default_folder("trial") != default_folder("tune")


def test_compare_prints_the_same_for_text_and_terminal(tmp_path):
    """`compare --format text` (the old name) and `--format terminal` are one format; `analyze --format
    terminal` is the card, as without --format."""
    runner = CliRunner()
    saved = tmp_path / "d.json"
    res = runner.invoke(main, ["analyze", str(SAMPLE), "--hta", "off", "-q", "--json", str(saved)])
    assert res.exit_code == 0 and json.loads(saved.read_text())["schema"] == "ddpdoctor.diagnosis/1", res.output
    outs = [runner.invoke(main, ["compare", str(saved), str(saved), "--format", f]) for f in ("text", "terminal")]
    assert outs[0].exit_code == outs[1].exit_code == 0 and outs[0].output == outs[1].output
    assert "step time" in outs[0].output
    quiet = runner.invoke(main, ["compare", str(saved), str(saved), "-q", "--hta", "off"])  # --hta: still taken
    assert quiet.exit_code == 0 and quiet.output == ""
    card = runner.invoke(main, ["analyze", str(SAMPLE), "--hta", "off", "--format", "terminal"])
    plain = runner.invoke(main, ["analyze", str(SAMPLE), "--hta", "off"])
    assert card.exit_code == 0 and card.output == plain.output and card.output.startswith("Verdict:")
    md = [runner.invoke(main, ["report", str(saved), "--format", f]).output for f in ("md", "markdown")]
    assert md[0] == md[1] and md[0].startswith("#")


def test_tune_refuses_a_bad_analysis_option_before_running_anything(tmp_path):
    out = tmp_path / "t"
    for option in (["--set", "XX001.nope=1"], ["--rules", str(tmp_path / "none")]):
        res = CliRunner().invoke(main, ["tune", "--out", str(out), *option, "--", "python", "x.py"])
        assert res.exit_code == 2 and not out.exists(), res.output


def test_tune_writes_the_final_settings_diagnosis_and_is_quiet_with_q(tmp_path, monkeypatch, capfd):
    """`tune --json/--report` write the diagnosis of the run that stands for the final settings, by
    `analyze` with the same rule options; `-q` prints nothing (the loop itself is replaced by a fake)."""
    import sys

    from ddpdoctor.diagnosis import run_analyze
    from ddpdoctor.trial import tune as tune_loop

    bundle = str(ROOT / "sample_traces" / "capture_gloo_2ranks_slow_rank")
    seen = {}

    def fake_run_tune(opts, say, emit, write):
        seen["opts"] = opts
        say("progress")
        emit("a trial line")
        report = run_analyze([bundle])
        st = tune_loop.State(stopped="nothing left predicts a material gain", best_bundle=bundle)
        write(st, report, report)
        return st, report, report

    monkeypatch.setattr(tune_loop, "run_tune", fake_run_tune)
    out, saved, rep = tmp_path / "t", tmp_path / "final.json", tmp_path / "rep"
    args = ["tune", "--out", str(out), "--json", str(saved), "--report", str(rep), "--hta", "off", "-q"]
    args += ["--set", "metrics.straggler.min_late_share=0.95", "--", sys.executable, "-c", "pass"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0 and res.output == "", res.output
    assert capfd.readouterr() == ("", "")  # nor the analysis it starts
    assert seen["opts"].analyze_opts.hta == "off" and seen["opts"].ruleset is not None
    d = json.loads(saved.read_text())
    assert d["schema"] == "ddpdoctor.diagnosis/1" and (rep / "report.md").is_file() and (out / "tune.json").is_file()
    # the --set reached the final diagnosis too: no steady straggler at a 95 % lateness threshold
    assert "IM001" not in [f["rule"] for f in d["findings"]]
