"""A watched run in one screen (issue 38): ``ddpdoctor analyze DIR`` on a ``ddpdoctor run --watch`` folder (one
holding ``watch.json``, schema ``ddpdoctor.watch/1``).

Step time per rank over the run (a line of medians per rank), "healthy until step S", then each incident with
the verdict and first fix of its own bundle (``DIR/incidents/NNN-step<S>-<kind>/``, analyzed with the public
API as ``ddpdoctor analyze`` would), or for a hang what each rank was doing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

WATCH_FILE = "watch.json"
WATCH_SCHEMA = "ddpdoctor.watch/1"
SPARK = " ▁▂▃▄▅▆▇█"
COLUMNS = 48


def is_watch_folder(path) -> bool:
    return (Path(path) / WATCH_FILE).is_file()


def load_watch(path) -> dict | None:
    try:
        d = json.loads((Path(path) / WATCH_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and d.get("schema") == WATCH_SCHEMA else None


def step_series(path, rank: int) -> list[tuple[int, float]]:
    """(step, wall seconds) of one rank's ``watch-steps.jsonl``."""
    out = []
    try:
        with open(Path(path) / "ranks" / f"rank{rank}" / "watch-steps.jsonl", encoding="utf-8") as fh:
            for line in fh:
                try:
                    d = json.loads(line)
                    out.append((int(d["step"]), float(d["wall_s"])))
                except (ValueError, KeyError, TypeError):
                    continue
    except OSError:
        pass
    return out


def cells(series: list[tuple[int, float]], columns: int = COLUMNS) -> list[float]:
    """The mean step time in each of ``columns`` equal stretches of the run (the mean: pauses show)."""
    per = max(1, -(-len(series) // columns))
    return [sum(t for _s, t in series[i : i + per]) / len(series[i : i + per]) for i in range(0, len(series), per)]


def sparkline(values: list[float], top: float) -> str:
    if not values or top <= 0:
        return ""
    return "".join(SPARK[min(len(SPARK) - 1, max(1, round(v / top * (len(SPARK) - 1))))] for v in values)


def _incident_lines(root: Path, inc: dict) -> list[str]:
    kind, step = inc.get("kind"), inc.get("step")
    ranks = inc.get("ranks") or []
    head = f"incident {inc.get('n')}: {kind} at step {step}"
    if inc.get("raised_by_rank") is not None:
        head += f", raised by rank {inc['raised_by_rank']}"
    lines = [head, f"  why: {inc['why']}"] if inc.get("why") else [head]
    path = root / str(inc.get("path") or "")
    if not path.is_dir():
        return [*lines, f"  no bundle was written at {path}"]
    lines.append(f"  bundle: {path} ({len(ranks)} rank{'s' if len(ranks) != 1 else ''} filed)")
    if kind == "hang":
        lines += [*_hang_lines(path), f"  stacks: {path}/ranks/rank*/stacks.txt"]
        if not list(path.glob("ranks/rank*/output.log")):  # the job still ran: no failure in its logs to read
            return lines
        lines.append("  then the job failed (its logs joined this incident):")
    try:
        from .api import analyze
        from .errors import DDPDoctorError

        doc = analyze(str(path))
    except DDPDoctorError as exc:
        return [*lines, f"  its analysis stopped: {exc}"]
    v = doc.verdict
    label = getattr(v, "label", None) or getattr(v, "summary", None)
    if label:
        lines.append(f"  verdict: {label}")
    fixable = [f for f in doc.findings if getattr(f, "fixes", None)]
    # the finding behind the verdict first (a configuration finding of high severity may rank above it)
    first = next((f for f in fixable if getattr(f, "category", None) == getattr(v, "bottleneck", None)), None)
    first = first or (fixable[0] if fixable else None)
    if first is not None:
        on = getattr(first, "ranks", None)
        where = f" (rank{'s' if on and len(on) > 1 else ''} {', '.join(map(str, on))})" if on else ""
        lines.append(f"  finding: {first.title}{where}")
        lines.append(f"  first fix: {first.fixes[0].title}")
    lines.append(f"  details: ddpdoctor analyze {path}")
    return lines


def main_thread_frames(text: str) -> list[str]:
    """The main thread's frames in a faulthandler dump (innermost first): the block that reaches ``<module>``."""
    for block in text.split("\n\n"):
        frames = [ln.strip() for ln in block.splitlines() if ln.strip().startswith("File ")]
        if frames and frames[-1].endswith("in <module>"):
            return frames
    return []


def _user_frame(frames: list[str]) -> str | None:
    keep = [f for f in frames if "/torch/" not in f and "/lib/python" not in f and "ddpdoctor_capture_agent" not in f]
    return keep[0] if keep else None


def _hang_lines(path: Path) -> list[str]:
    """What each rank was doing when the hang was recorded: the hang watcher's reading (logs/hang.py, as a
    failed run's analysis reads it) and the innermost frame of the script in its stack dump."""
    from .logs.hang import hang_dumps, hang_facts

    facts = hang_facts(hang_dumps([str(path)]), [], None)
    out = [
        f"  verdict: a hang, recorded before the process group's timeout: {'; '.join(facts['failure.hang.per_rank'])}"
    ]
    if not facts["failure.hang.per_rank"]:
        out = ["  verdict: a hang, recorded before the process group's timeout"]
    for d in sorted((path / "ranks").glob("rank*")):
        try:
            text = (d / "stacks.txt").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        frame = _user_frame(main_thread_frames(text))
        if frame:
            out.append(f"  {d.name} stands at: {frame}")
    return out


def render_watch(path) -> str:
    root = Path(path)
    w = load_watch(root)
    if w is None:
        return f"{root / WATCH_FILE} is not a ddpdoctor.watch/1 record"
    steps = {int(r): n for r, n in (w.get("steps_seen") or {}).items() if n is not None}
    series = {r: step_series(root, r) for r in sorted(steps)}
    means = {r: cells(s) for r, s in series.items() if s}
    top = max((v for c in means.values() for v in c), default=0.0)
    lines = [f"Watched run: {len(steps)} rank{'s' if len(steps) != 1 else ''}, " + _steps_text(steps)]
    for r, s in series.items():
        if s:
            med = sorted(t for _x, t in s)[len(s) // 2]
            lines.append(f"  rank {r:<3} {sparkline(means[r], top)}  median {med * 1000:.1f} ms")
    incidents = w.get("incidents") or []
    if not incidents:
        lines.append(f"Healthy throughout: no incident in {max(steps.values(), default=0)} steps.")
    else:
        first = incidents[0]
        onset = first.get("onset_step", first.get("step"))
        lines.append(f"Healthy until step {onset} (then {first.get('kind')}; recorded at step {first.get('step')}).")
    ov = w.get("overhead") or {}
    if ov.get("share_of_step") is not None:
        lines.append(
            f"Watch overhead: {ov['share_of_step'] * 100:.2f} % of step time "
            f"({(ov.get('per_step_s') or 0) * 1e6:.0f} µs per step, measured inside the ranks)"
        )
    for r, episodes in sorted((w.get("contention") or {}).items(), key=lambda kv: int(kv[0])):
        for e in episodes:
            if e.get("run_queue_extra_ms") is None:
                continue  # a rank that only waited for this one: said once, by the contended rank
            lines.append(
                f"Host contention on rank {r} from about step {e.get('step')}: steps {e.get('ratio')}x, "
                f"{e.get('run_queue_extra_ms')} of {e.get('extra_ms')} ms more per step waiting for a CPU "
                f"(other processes took its cores): no incident; check what else runs on its node."
            )
    for inc in w.get("not_recorded") or []:
        lines.append(
            f"Raised but not recorded: {inc.get('kind')} for step {inc.get('step')} (rank {inc.get('raised_by_rank')}: "
            f"{inc.get('why')}); the job ended before that step."
        )
    for inc in incidents:
        lines.append("")
        lines.extend(_incident_lines(root, inc))
    return "\n".join(lines)


def _steps_text(steps: dict[int, int]) -> str:
    counts = sorted(set(steps.values()))
    if len(counts) == 1:
        return f"{counts[0]} steps each"
    return "steps " + ", ".join(f"rank {r}: {n}" for r, n in sorted(steps.items()))


def watch_folder_of(paths) -> str | None:
    """The one watch folder among ``paths`` (``analyze DIR`` with DIR a --watch folder), else None."""
    if len(paths) == 1 and os.path.isdir(paths[0]) and is_watch_folder(paths[0]):
        return str(paths[0])
    return None
