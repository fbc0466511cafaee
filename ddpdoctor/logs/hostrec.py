"""The interface to name in ``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME``: from the bundle's host
records (``hosts/*.json`` written by ``ddpdoctor run``: every interface with its addresses and state),
else from the interfaces NCCL listed in its logs.

A usable interface is up, not loopback/virtual, and has an IPv4 address; among those, one present on
every host, preferring the one whose subnet holds MASTER_ADDR, then ib*/bond*/en*/eth* names.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from .netfacts import PREFERRED, is_virtual

MAX_HOST_FILE = 4 * 1024 * 1024


def host_records(paths: list[str]) -> dict[str, dict]:
    """{hostname: record} of the ``hosts/*.json`` files under ``paths`` (a bundle, or a folder of bundles)."""
    out: dict[str, dict] = {}
    for p in paths:
        root = Path(p)
        if not root.is_dir():
            continue
        for f in sorted(root.glob("hosts/*.json")) + sorted(root.glob("*/hosts/*.json")):
            try:
                if f.stat().st_size > MAX_HOST_FILE:
                    continue
                d = json.loads(f.read_text(encoding="utf-8", errors="replace"))
            except (OSError, ValueError, RecursionError):
                continue
            if isinstance(d, dict) and str(d.get("schema", "")).startswith("ddpdoctor.host/"):
                out[str(d.get("hostname") or f.stem)] = d
    return out


def _ipv4(addrs) -> list[ipaddress.IPv4Interface]:
    out = []
    for a in addrs or []:
        try:
            itf = ipaddress.ip_interface(str(a))
        except ValueError:
            continue
        if isinstance(itf, ipaddress.IPv4Interface):
            out.append(itf)
    return out


def usable_interfaces(rec: dict) -> dict[str, list[str]]:
    """{name: [IPv4 addresses]} of the record's interfaces that could carry the job's traffic."""
    out = {}
    for itf in rec.get("interfaces") or []:
        if not isinstance(itf, dict) or not itf.get("name") or is_virtual(str(itf["name"])):
            continue
        if itf.get("up") is False:
            continue
        v4 = _ipv4(itf.get("addresses"))
        if v4:
            out[str(itf["name"])] = [str(a) for a in v4]
    return out


def _master_addr(records: dict[str, dict]) -> ipaddress.IPv4Address | None:
    for rec in records.values():
        env = rec.get("env") if isinstance(rec.get("env"), dict) else {}
        v = env.get("MASTER_ADDR")
        try:
            addr = ipaddress.ip_address(str(v))
        except ValueError:
            continue
        if isinstance(addr, ipaddress.IPv4Address) and not addr.is_loopback:
            return addr
    return None


def suggest_from_hosts(records: dict[str, dict]) -> tuple[str | None, dict[str, list[str]]]:
    """(interface name, {host: usable names}) from the host records."""
    usable = {h: usable_interfaces(r) for h, r in records.items()}
    names = [set(v) for v in usable.values()]
    if not names or not all(names):
        return None, {h: sorted(v) for h, v in usable.items()}
    common = set.intersection(*names)
    master = _master_addr(records)

    def routes_to_master(name: str) -> bool:
        if master is None:
            return False
        return any(master in ipaddress.ip_interface(a).network for v in usable.values() for a in v.get(name, []))

    pick = sorted(common, key=lambda n: (not routes_to_master(n), not PREFERRED.match(n), n))
    return (pick[0] if pick else None), {h: sorted(v) for h, v in usable.items()}


def fill_network_suggestion(facts: dict, records: dict[str, dict]) -> None:
    """Set ``failure.network.suggested_ifname`` (+ ``.interfaces``, ``.suggestion_source``)."""
    name, per_host = suggest_from_hosts(records) if records else (None, {})
    source = "the host records" if name else None
    exclusion_ok = facts.get("failure.network.backend") != "gloo"  # gloo takes names only
    subnet = facts.get("failure.network.problem") == "subnet"  # NCCL's own pick is what failed there
    if (
        name is None
        and not subnet
        and facts.get("nccl.suggested_ifname")
        and (exclusion_ok or not str(facts["nccl.suggested_ifname"]).startswith("^"))
    ):
        name, source = facts["nccl.suggested_ifname"], "NCCL's interface list"
    if name is not None and name == facts.get("failure.network.ifname"):
        name, source = None, None  # the name that failed is no suggestion
    facts["failure.network.suggested_ifname"] = name
    facts["failure.network.interfaces"] = sorted({n for v in per_host.values() for n in v})
    facts["failure.network.suggestion_source"] = source
    facts["failure.network.suggested_gloo_ifname"] = name if name and not name.startswith("^") else None
