"""Which host recorded each rank's trace, for the clock alignment across hosts (metrics/clocks.py).

Sources, in order of trust (the first that names a rank's host wins):

1. ``trace``: the trace's own ``host_name`` (read by the decoder, ``RankSummary.host``);
2. ``file name``: torch.profiler's ``tensorboard_trace_handler`` names its files
   ``{hostname}_{pid}.{time_ns}.pt.trace.json[.gz]`` (its default worker name);
3. ``folder``: the node folder a trace was given in — each PATH argument when several are given,
   else each top-level folder of the one PATH — only when every rank is in one such folder, the
   folders hold no rank in common (folders sharing ranks are runs or windows, not nodes), and no rank
   has a host name from 1 or 2 (folder labels and host names do not name hosts the same way).

A rank whose host none of these names is left unknown; the clock estimate then corrects nothing
(it needs every rank's host) and the analysis says so once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import sources
from .discover import Discovery, compact_ranks, rank_from_name

# {hostname}_{pid}.{time_ns}.pt.trace.json[.gz]; a host name may itself hold '_', '.', '-'; time.time_ns()
# has 19 digits (a custom worker name with a ms time, `worker0_step_12.1694128201545`, is not this form)
_HANDLER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d{1,7})\.(?P<ns>\d{19})\.pt\.trace\.json(?:\.gz)?$")


def host_from_name(name: str) -> str | None:
    """The host in a trace handler's default file name, else None (also when the "host" names a rank,
    `rank3_…`/`worker3_…`: a worker name chosen per rank, not a host)."""
    m = _HANDLER_NAME.match(name)
    if not m or rank_from_name(Path(m.group("host"))) is not None:
        return None
    return m.group("host")


@dataclass
class HostIdentity:
    """Per rank: the host and how it was known (``trace``, ``file name``, ``folder``); absent = unknown."""

    host: dict[int, str] = field(default_factory=dict)
    source: dict[int, str] = field(default_factory=dict)
    note: str | None = None  # said once: what is unknown and what that means for the clocks

    def as_dict(self) -> dict:
        return {
            "by_rank": {str(r): {"host": h, "source": self.source[r]} for r, h in sorted(self.host.items())},
            "note": self.note,
        }


def node_folders(paths: list[str], files_by_rank: dict[int, list]) -> dict[int, str]:
    """rank -> node folder label, when the given folders separate the ranks into nodes (else {}):
    every file of a rank (all its windows) in one folder, at least two folders."""
    local = [p for p in paths if not sources.is_url(p) and Path(p).is_dir()]
    if not local or len(local) != len(paths):
        return {}
    roots = [Path(p) for p in local]
    out: dict[int, str] = {}
    for rank, files in files_by_rank.items():
        if any(isinstance(f.path, sources.RemoteFile) for f in files):
            return {}
        labels = {_folder_of(Path(f.path), roots, local) for f in files}
        label = labels.pop() if len(labels) == 1 else None
        if label is None:
            return {}  # a rank in two folders (or in none of them): not one folder per node
        out[rank] = label
    if len(set(out.values())) < 2:
        return {}
    return out


def _folder_of(f: Path, roots: list[Path], given: list[str]) -> str | None:
    for root, text in zip(roots, given):
        try:
            rel = f.relative_to(root)
        except ValueError:
            continue
        if len(roots) > 1:  # several PATHs: each one is a node
            names = [r.name for r in roots]
            return root.name if root.name and names.count(root.name) == 1 else text.rstrip("/")
        return rel.parts[0] if len(rel.parts) > 1 else None  # one PATH: its top-level folders
    return None


def identify_hosts(trace_hosts: dict[int, str | None], disc: Discovery, paths: list[str]) -> HostIdentity:
    """Each rank's host from the sources above; ``trace_hosts`` is the decoder's ``host_name`` per rank."""
    out = HostIdentity()
    files_by_rank = {r: list(disc.by_rank.get(r) or []) + list(disc.skipped_windows.get(r) or []) for r in trace_hosts}
    for rank in sorted(trace_hosts):
        h = trace_hosts[rank]
        if h:
            out.host[rank], out.source[rank] = h, "trace"
            continue
        files = files_by_rank.get(rank) or []
        name = host_from_name(files[0].path.name) if files else None
        if name:
            out.host[rank], out.source[rank] = name, "file name"
    ranks = sorted(trace_hosts)
    if not out.host:
        folders = node_folders(paths, {r: files_by_rank[r] for r in ranks if files_by_rank.get(r)})
        if folders and set(folders) == set(ranks):
            for r in ranks:
                out.host[r], out.source[r] = folders[r], "folder"
    if len(ranks) < 2:
        return out
    unknown = [r for r in ranks if r not in out.host]
    if len(unknown) == len(ranks):
        out.note = (
            "hosts not identified (no host_name in the traces, file names not the trace handler's "
            "{host}_{pid}.{time}.pt.trace.json, no folder per node): the ranks' clocks are assumed to agree"
        )
    elif unknown:
        out.note = (
            f"host unknown for rank{'s' if len(unknown) > 1 else ''} {compact_ranks(unknown)} of "
            f"{len(ranks)}: clocks across hosts are not aligned, the ranks' clocks are assumed to agree"
        )
    return out
