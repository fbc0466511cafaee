"""Facts about the machine `ddpdoctor run` runs on (no torch import: the ranks report
torch/NCCL details in their settings, merged in at the end)."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from ...redact import join_argv, redact_argv, redact_env
from ..agent import contract

HOST_SCHEMA = contract.HOST_SCHEMA


def safe_hostname(name: str | None = None) -> str:
    name = name or socket.gethostname() or "localhost"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _run(cmd: list[str], timeout: float = 10.0) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def gpus() -> list[dict]:
    out = _run(
        ["nvidia-smi", "--query-gpu=index,name,memory.total,pci.bus_id,driver_version", "--format=csv,noheader,nounits"]
    )
    found = []
    if out:
        for line in out.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 3:
                try:
                    mem = int(float(parts[2])) * 1024 * 1024
                except ValueError:
                    mem = None
                found.append(
                    {
                        "index": parts[0],
                        "name": parts[1],
                        "memory_bytes": mem,
                        "pci_bus_id": parts[3] if len(parts) > 3 else None,
                        "driver": parts[4] if len(parts) > 4 else None,
                        "vendor": "nvidia",
                    }
                )
        return found
    out = _run(["rocm-smi", "--showproductname", "--json"])
    if out:
        try:
            for key, v in json.loads(out).items():
                if key.startswith("card"):
                    found.append(
                        {
                            "index": key[4:],
                            "name": v.get("Card series") or v.get("Card model"),
                            "memory_bytes": None,
                            "vendor": "amd",
                        }
                    )
        except (ValueError, AttributeError):
            pass
    return found


def interfaces() -> list[dict]:
    result: dict[str, dict] = {}
    base = Path("/sys/class/net")
    if base.is_dir():
        for d in sorted(base.iterdir()):
            info = {"name": d.name, "up": None, "operstate": None, "speed_mbps": None, "mtu": None, "addresses": []}
            for key, fname in (("operstate", "operstate"), ("speed_mbps", "speed"), ("mtu", "mtu")):
                try:
                    val = (d / fname).read_text().strip()
                    info[key] = int(val) if key != "operstate" else val
                except (OSError, ValueError):
                    pass
            info["up"] = info["operstate"] in ("up", "unknown") if info["operstate"] else None
            result[d.name] = info
    out = _run(["ip", "-j", "addr"], timeout=5)
    if out:
        try:
            for itf in json.loads(out):
                info = result.setdefault(itf["ifname"], {"name": itf["ifname"], "addresses": []})
                info["addresses"] = [f"{a.get('local')}/{a.get('prefixlen')}" for a in itf.get("addr_info", [])]
                if "UP" in itf.get("flags", []):
                    info["up"] = True
        except (ValueError, KeyError, TypeError):
            pass
    elif not result:
        for _idx, name in socket.if_nameindex():
            result[name] = {"name": name, "addresses": [], "up": None}
    return list(result.values())


def shm() -> dict | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return {"total_bytes": st.f_frsize * st.f_blocks, "free_bytes": st.f_frsize * st.f_bavail}


def ib_devices() -> list[str]:
    p = Path("/sys/class/infiniband")
    return sorted(d.name for d in p.iterdir()) if p.is_dir() else []


def cpu_info() -> dict:
    aff = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu_count": os.cpu_count(), "affinity_count": len(aff) if aff is not None else None, "model": model}


def memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def torch_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def nnodes_from_argv(argv: list[str]) -> str | None:
    """torchrun's --nnodes value (``2`` or ``1:4``) if the command gives one."""
    for i, a in enumerate(argv):
        for opt in ("--nnodes", "--nnodes_", "--num-nodes"):
            if a == opt and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(opt + "="):
                return a.split("=", 1)[1]
    return None


def collect(argv: list[str], env: dict[str, str]) -> dict:
    topo = _run(["nvidia-smi", "topo", "-m"])
    g = gpus()
    return {
        "schema": HOST_SCHEMA,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "cpu": cpu_info(),
        "memory_bytes": memory_bytes(),
        "gpus": g,
        "gpu_count": len(g),
        "nvidia_smi_topo": topo,
        "nvlink": bool(re.search(r"\bNV\d+\b", topo)) if topo else None,
        "ib_devices": ib_devices(),
        "interfaces": interfaces(),
        "shm": shm(),
        "torch_version": torch_version(),
        "nccl_version": None,
        "nnodes_arg": nnodes_from_argv(argv),
        "command": join_argv(argv),
        "argv": redact_argv(argv),
        "cwd": os.getcwd(),
        "env": redact_env(env),
    }
