"""Flight Recorder (``TORCH_FR_BUFFER_SIZE``) dumps: one per rank, a pickle (or JSON) dict with
``version``, ``pg_config`` and ``entries`` (each with ``process_group``, ``collective_seq_id``,
``profiling_name``, ``state``, ``input_sizes``, ``input_dtypes``, …).

Dumps are read with a restricted unpickler that builds only plain containers and scalars
(a dump pulled off a ticket is untrusted input; torch's own loader uses plain pickle.load).
The entries are then checked here for missing ranks, ranks behind and mismatched
collectives. Analysis never imports torch (only capture does): the Flight Recorder rule's fix gives the
command that runs torch's own analyzer (``python -m torch.distributed.flight_recorder.fr_trace``) on the same dumps.
"""

from __future__ import annotations

import ast
import io
import json
import pickle
from pathlib import Path

from .. import safe_io


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a Flight Recorder dump")


def load_dump(path: Path) -> dict | None:
    data = safe_io.read_capped(path, safe_io.max_log_bytes(), "Flight Recorder dump", "DDPDOCTOR_MAX_LOG_BYTES")
    try:
        if data[:1] in (b"{", b"["):
            d = json.loads(data)
        else:
            d = _SafeUnpickler(io.BytesIO(data)).load()
    except Exception:  # noqa: BLE001 - an unreadable dump becomes a note, never a crash
        return None
    return d if isinstance(d, dict) and isinstance(d.get("entries"), list) else None


def _pg(e: dict) -> str:
    pg = e.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        return str(pg[0])
    return str(e.get("pg_id", pg if pg is not None else "0"))


def _ranks_of(pg_config) -> dict[str, list[int]]:
    out = {}
    if not isinstance(pg_config, dict):
        return out
    for name, cfg in pg_config.items():
        r = cfg.get("ranks") if isinstance(cfg, dict) else None
        if isinstance(r, str):
            try:
                r = ast.literal_eval(r)
            except (ValueError, SyntaxError):
                r = None
        if isinstance(r, (list, tuple)):
            out[str(name)] = [int(x) for x in r]
    return out


def analyze_dumps(dumps: dict[int, dict], world_size: int | None = None) -> dict:
    """Facts (``failure.flight_recorder.*`` without the prefix) from dumps keyed by rank."""
    ranks = sorted(dumps)
    expected: set[int] = set(range(world_size)) if world_size else set()
    for d in dumps.values():
        for members in _ranks_of(d.get("pg_config")).values():
            expected.update(members)
    last_seq: dict[str, dict[int, int]] = {}  # pg -> rank -> highest collective_seq_id recorded
    last_done: dict[str, dict[int, int]] = {}
    stuck: dict[int, dict] = {}  # rank -> first not-completed collective
    by_seq: dict[tuple[str, int], dict[int, dict]] = {}
    for rank, d in dumps.items():
        for e in d["entries"]:
            if not isinstance(e, dict) or e.get("is_p2p"):
                continue
            seq = e.get("collective_seq_id")
            if not isinstance(seq, int):
                continue
            pg = _pg(e)
            last_seq.setdefault(pg, {})[rank] = max(seq, last_seq.get(pg, {}).get(rank, -1))
            state = e.get("state")
            if state == "completed":
                last_done.setdefault(pg, {})[rank] = max(seq, last_done.get(pg, {}).get(rank, -1))
            elif rank not in stuck:
                stuck[rank] = {"seq": seq, "op": e.get("profiling_name"), "pg": pg, "state": state}
            by_seq.setdefault((pg, seq), {})[rank] = e
    out: dict = {
        "present": True,
        "ranks": ranks,
        "missing_ranks": sorted(expected - set(ranks)),
        "last_seq": {},
        "last_completed": {},
        "behind_rank": None,
        "behind_by": None,
        "stuck": {str(r): v for r, v in sorted(stuck.items())},
        "mismatch": None,
    }
    main_pg = "0" if "0" in last_seq else (sorted(last_seq)[0] if last_seq else None)
    if main_pg is not None:
        seqs = last_seq[main_pg]
        out["last_seq"] = {str(r): s for r, s in sorted(seqs.items())}
        out["last_completed"] = {str(r): s for r, s in sorted(last_done.get(main_pg, {}).items())}
        if len(seqs) > 1 and max(seqs.values()) > min(seqs.values()):
            low = min(seqs.values())
            behind = sorted(r for r, s in seqs.items() if s == low)
            out["behind_rank"], out["behind_ranks"] = behind[0], behind
            out["behind_by"] = max(seqs.values()) - low
    for (pg, seq), per_rank in sorted(by_seq.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if len(per_rank) < 2:
            continue
        sig = {
            r: (e.get("profiling_name"), str(e.get("input_sizes")), str(e.get("input_dtypes")))
            for r, e in per_rank.items()
        }
        if len(set(sig.values())) > 1:
            base_rank = min(sig)
            odd = sorted(r for r, s in sig.items() if s != sig[base_rank])
            aspects = [n for i, n in enumerate(("op", "shape", "dtype")) if len({s[i] for s in sig.values()}) > 1]
            out["mismatch"] = {
                "pg": pg,
                "seq": seq,
                "ranks": sorted(sig),
                "odd_ranks": odd,
                "aspects": aspects,
                "ops": {str(r): s[0] for r, s in sorted(sig.items())},
                "shapes": {str(r): s[1] for r, s in sorted(sig.items())},
                "dtypes": {str(r): s[2] for r, s in sorted(sig.items())},
            }
            break
    return out
