"""NcclFacts (+ host facts from capture) → ``nccl.*`` facts, with an NCCL_SOCKET_IFNAME suggestion."""

from __future__ import annotations

import re

from .model import NcclFacts

VIRTUAL = re.compile(
    r"^(lo\d*|docker\d*|virbr\d*|veth\w*|br-\w+|cni\d*|flannel[\w.]*|cali\w+|tun\d*|tap\d*|"
    r"kube[\w-]*|vxlan[\w.]*|weave|podman\d*|lxcbr\d*|vmnet\d*)$"
)
PREFERRED = re.compile(r"^(ib|bond|en|eth|em|p\d|hsn|efa)")


def is_virtual(name: str) -> bool:
    return bool(VIRTUAL.match(name))


def _host_interfaces(known: dict) -> dict[str, list[str]]:
    """``host.interfaces`` from capture, in any of the shapes it may take: a list of names, a list of
    {"name": …} dicts, {name: address}, or {host: [names]}; also ``hosts.<host>.interfaces``."""
    out: dict[str, list[str]] = {}

    def names(v) -> list[str]:
        if isinstance(v, str):
            return [s.strip() for s in v.split(",") if s.strip()]
        if isinstance(v, dict):
            return [str(x) for x in v]
        if isinstance(v, (list, tuple)):
            return [
                str(x.get("name")) if isinstance(x, dict) else str(x)
                for x in v
                if (x.get("name") if isinstance(x, dict) else x)
            ]
        return []

    v = known.get("host.interfaces")
    if (
        isinstance(v, dict)
        and v
        and all(isinstance(x, (list, tuple, dict)) for x in v.values())
        and not all(isinstance(x, (str, int)) for x in v.values())
    ):
        for host, lst in v.items():
            out[str(host)] = names(lst)
    elif v is not None:
        out["host"] = names(v)
    for key, val in known.items():
        m = re.match(r"^hosts?\.([^.]+)\.interfaces$", key)
        if m:
            out[m.group(1)] = names(val)
    return out


def suggest_ifname(per_host: dict[str, list[str]]) -> str | None:
    """An interface present on every host that is not loopback/virtual, preferring ib*/bond*/en*/eth*;
    when hosts have no common good name, the exclusion form that drops the virtual ones."""
    good = [[n for n in names if not is_virtual(n)] for names in per_host.values() if names]
    if not good:
        return None
    common = set(good[0]).intersection(*map(set, good[1:])) if len(good) > 1 else set(good[0])
    if common:
        return sorted(common, key=lambda n: (not PREFERRED.match(n), not n.startswith("ib"), n))[0]
    bad = sorted({n for names in per_host.values() for n in names if is_virtual(n)} | {"lo", "docker0"})
    return "^" + ",".join(bad)


def nccl_facts(n: NcclFacts, known: dict) -> dict:
    chosen = list(dict.fromkeys(n.socket_ifnames + n.bootstrap_ifnames))
    bad = [x for x in chosen if is_virtual(x)]
    by_host = {h: v for h, v in n.ifnames_by_host.items() if v}
    differ = len(by_host) > 1 and len({tuple(sorted(v)) for v in by_host.values()}) > 1
    transport = n.transport
    net_paths = n.path_types("net")
    if transport is None:
        if any("SOCKET" in p["via"].upper() for p in net_paths):
            transport = "Socket"
        elif any("/IB" in p["via"].upper() for p in net_paths):
            transport = "IB"
        elif n.socket_ifnames and n.ib_present is False:
            transport = "Socket"
    host_ifs = _host_interfaces(known)
    host_ib = known.get("host.ib_devices") or known.get("host.infiniband") or []
    ib_known = bool(n.ib_devices) or bool(host_ib) or any(x.startswith("ib") for v in host_ifs.values() for x in v)
    candidates = host_ifs or by_host or ({"?": chosen} if chosen else {})
    suggestion = suggest_ifname(candidates) if candidates else None
    problem = None
    if chosen and len(bad) == len(chosen):
        problem = "only_virtual"
    elif bad:
        problem = "some_virtual"
    elif differ:
        problem = "names_differ"
    shm, p2p = n.path_types("shm"), n.path_types("p2p")
    return {
        "nccl.present": n.present,
        "nccl.version": n.version,
        "nccl.transport": transport,
        "nccl.ib_present": n.ib_present,
        "nccl.ib_devices": list(n.ib_devices),
        "nccl.ib_known": ib_known,
        "nccl.ibverbs_missing": n.ibverbs_missing,
        "nccl.socket_ifnames": list(n.socket_ifnames),
        "nccl.bootstrap_ifnames": list(n.bootstrap_ifnames),
        "nccl.chosen_ifnames": chosen,
        "nccl.ifnames_by_host": by_host,
        "nccl.ifnames_differ": differ,
        "nccl.bad_ifnames": bad,
        "nccl.only_bad_ifnames": bool(chosen) and len(bad) == len(chosen),
        "nccl.ifname_problem": problem,
        "nccl.suggested_ifname": suggestion,
        "nccl.addrs_by_ifname": dict(n.addrs_by_ifname),
        "nccl.hosts": list(n.hosts),
        "nccl.nnodes": n.nnodes,
        "nccl.hosts_seen": len(n.hosts),
        "nccl.nranks": n.nranks,
        "nccl.socket_with_ib": transport == "Socket" and ib_known,
        "nccl.socket_without_ib": transport == "Socket" and not ib_known,
        "nccl.shm_paths": len(shm),
        "nccl.p2p_paths": len(p2p),
        "nccl.p2p_via": sorted({x["via"] for x in p2p}),
        "nccl.net_paths": len(net_paths),
        "nccl.net_via": sorted({p["via"] for p in net_paths}),
        "nccl.shm_instead_of_p2p": bool(shm) and not p2p,
        "nccl.nvlink_seen": n.nvlink_seen,
        "nccl.p2p_disabled": n.p2p_disabled,
        "nccl.gdr": n.gdr,
        "nccl.rings": n.rings,
        "nccl.trees": n.trees,
        "nccl.topo_file": n.topo_file,
        "nccl.graph_file": n.graph_file,
    }
