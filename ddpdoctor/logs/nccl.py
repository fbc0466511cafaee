"""NCCL_DEBUG=INFO lines → NcclFacts: version, interfaces, IB, transport, channel paths, GDR, ranks.

Formats of several NCCL generations are accepted, e.g.
  ``NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:…``   ``NET : Using interface enp1s0f0:100.97.16.164<0>``
  ``Bootstrap : Using eth0:10.0.0.1<0>``   ``NET/IB : No device found.``   ``NET/IB : Using [0]mlx5_0:1/IB``
  ``NET/IB: [2] mlx5_1:1/IB``   ``Using network Socket``   ``Using internal Network IB``
  ``Channel 00/0 : 0[0] -> 1[1] via P2P/IPC``   ``Ring 00 : 1 -> 0 [receive] via NET/Socket/0``
  ``comm 0x… rank 3 nranks 8 cudaDev 3 …``   ``… nNodes 2 localRanks 8 …``   ``GPU Direct RDMA Enabled|Disabled``
"""

from __future__ import annotations

import re

from .model import NcclFacts

_VERSION = re.compile(r"NCCL version (\S+)")
_SOCK_USING = re.compile(r"NET/Socket : Using (.*)$")
_NET_USING_OLD = re.compile(r"\bNET : Using interface ([\w.\-:]+?):([\w.:%\-]+)<")
_BOOT = re.compile(r"Bootstrap : Using (.*)$")
_IFACE = re.compile(r"(?:\[\d+\])?([A-Za-z][\w.\-]*?):([0-9a-fA-F.:%]+[0-9a-fA-F])<\d+>")
_IB_NONE = re.compile(r"NET/IB ?: No device found", re.I)
_IB_DEV = re.compile(r"NET/IB ?: ?(?:Using )?((?:\[\d+\] ?[\w\-]+:\d+/(?:IB|RoCE)\s*)+)")
_IB_ONE = re.compile(r"\[\d+\] ?([\w\-]+:\d+)/(IB|RoCE)")
_NO_VERBS = re.compile(r"Failed to open libibverbs", re.I)
_NETWORK = re.compile(r"Using (?:internal )?[Nn]etwork (\w+)")
# bus ids are hex (``2[1d000] -> 3[1e000]``) in newer NCCL, device numbers (``0[0]``) in older ones; the
# transport is one word (``P2P/IPC``, ``P2P/CUMEM/read``, ``SHM/direct/direct``, ``NET/IB/0/GDRDMA``) or a phrase
# (``via direct shared memory``, ``via P2P/direct pointer``)
_CHANNEL = re.compile(
    r"(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)(?:\[([0-9a-fA-Fx:.]+)\])? -> (\d+)(?:\[([0-9a-fA-Fx:.]+)\])?"
    r"(?: \[(?:send|receive)\])? via (direct shared memory|direct pointer|\S+)"
)
_COMM = re.compile(r"comm 0x[0-9a-f]+ rank (\d+) n[Rr]anks (\d+)(?:.*?cudaDev (\d+))?(?:.*?nNodes (\d+))?")
_NNODES = re.compile(r"nNodes (\d+)")
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled)", re.I)
_NVLINK = re.compile(r"NVLink|\bNVL\b|NVL\[|NVS/", re.I)
_P2P_OFF = re.compile(r"P2P (?:is )?disabled|NCCL_P2P_DISABLE", re.I)
_TREES = re.compile(r"Trees \[")
# graph/topo.cc, graph/search.cc: ``NCCL_TOPO_FILE set by environment to /opt/…/topo.xml`` (and NCCL_GRAPH_FILE)
_XML_FILE_ENV = re.compile(r"\bNCCL_(TOPO|GRAPH)_FILE set by environment to (\S+)")


def path_type(via: str) -> str:
    v = via.upper()
    if v == "DIRECT SHARED MEMORY":
        return "shm"
    if v.startswith("P2P") or v == "DIRECT POINTER":
        return "p2p"
    if v.startswith("SHM"):
        return "shm"
    if v.startswith("NET") or v.startswith("COLLNET"):
        return "net"
    return "other"


class NcclCollector:
    def __init__(self) -> None:
        self.f = NcclFacts()
        self._if_host: dict[str, set] = {}

    def _add_if(self, host: str, name: str, addr: str, socket: bool) -> None:
        target = self.f.socket_ifnames if socket else self.f.bootstrap_ifnames
        if name not in target:
            target.append(name)
        self._if_host.setdefault(host, set()).add(name)
        addrs = self.f.addrs_by_ifname.setdefault(name, [])
        if addr not in addrs:
            addrs.append(addr)

    def feed(self, hdr: dict, msg: str, file_rank: int | None = None) -> None:
        f = self.f
        f.lines += 1
        host = hdr["host"]
        key = f"{host}:{hdr['pid']}"
        if host not in f.hosts:
            f.hosts.append(host)
        f.pid_dev.setdefault(key, hdr["dev"])
        if file_rank is not None:
            f.pid_rank.setdefault(key, file_rank)
        self.feed_plain(msg, host, key)

    def feed_plain(self, msg: str, host: str = "?", key: str | None = None) -> None:
        f = self.f
        m = _VERSION.search(msg)
        if m and f.version is None:
            f.version = m.group(1)
        if m and host != "?":
            f.versions_by_host.setdefault(host, m.group(1))
        m = _SOCK_USING.search(msg) or _BOOT.search(msg)
        if m:
            socket = "NET/Socket" in msg
            for name, addr in _IFACE.findall(m.group(1)):
                self._add_if(host, name, addr, socket)
        m = _NET_USING_OLD.search(msg)
        if m:
            self._add_if(host, m.group(1), m.group(2), True)
        if _IB_NONE.search(msg):
            if f.ib_present is None:
                f.ib_present = False
        m = _IB_DEV.search(msg)
        if m:
            f.ib_present = True
            for dev, _link in _IB_ONE.findall(m.group(1)):
                if dev not in f.ib_devices:
                    f.ib_devices.append(dev)
        if _NO_VERBS.search(msg):
            f.ibverbs_missing = True
            if f.ib_present is None:
                f.ib_present = False
        m = _NETWORK.search(msg)
        if m:
            f.transport = m.group(1)
        m = _CHANNEL.search(msg)
        if m:
            via = m.group(6)
            f.paths.append(
                {
                    "channel": int(m.group(1)),
                    "src": int(m.group(2)),
                    "dst": int(m.group(4)),
                    "via": via,
                    "type": path_type(via),
                    "host": host,
                }
            )
            if msg.lstrip().startswith("Ring"):
                f.rings += 1
            if "GDRDMA" in via.upper():
                f.gdr = True
        if _TREES.search(msg):
            f.trees += 1
        m = _COMM.search(msg)
        if m:
            if key:
                f.pid_rank[key] = int(m.group(1))
                if m.group(3) is not None:
                    f.pid_dev[key] = int(m.group(3))
            f.nranks = max(f.nranks or 0, int(m.group(2)))
        m = _NNODES.search(msg)
        if m:
            f.nnodes = max(f.nnodes or 0, int(m.group(1)))
        m = _GDR.search(msg)
        if m:
            if m.group(1).lower() == "enabled":
                f.gdr = True
            elif f.gdr is None:
                f.gdr = False
        if _NVLINK.search(msg):
            f.nvlink_seen = True
        if _P2P_OFF.search(msg):
            f.p2p_disabled = True
        m = _XML_FILE_ENV.search(msg)
        if m:
            if m.group(1) == "TOPO":
                f.topo_file = f.topo_file or m.group(2)
            else:
                f.graph_file = f.graph_file or m.group(2)

    def finish(self) -> NcclFacts:
        self.f.ifnames_by_host = {h: sorted(v) for h, v in self._if_host.items()}
        return self.f
