"""Data objects of the log analysis: one event per meaningful log line, and the result."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class LogEvent:
    rank: int | None  # global rank, None when the line cannot be attributed
    time: float | None  # seconds since the epoch (UTC) when the line carries a timestamp
    kind: str  # see KINDS
    text: str  # the line (prefixes removed), or a short summary for multi-line blocks
    file: str
    line_no: int  # 1-based line in `file`
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "time": self.time,
            "kind": self.kind,
            "text": self.text,
            "file": self.file,
            "line_no": self.line_no,
            "data": self.data,
        }


# Event kinds, in roughly causal order of importance
KINDS = {
    "oom": "CUDA out of memory (Python exception or NCCL 'Cuda failure … out of memory')",
    "killed": "the process was killed by a signal (SIGKILL, SIGTERM, SIGSEGV, …)",
    "exit": "a process exit reported by torchrun (exit code, signal)",
    "exception": "the last line of a Python traceback (exception type and message)",
    "crash": "a native crash (segmentation fault, core dump, abort)",
    "mismatch": "TORCH_DISTRIBUTED_DEBUG=DETAIL: ranks run different collectives",
    "rendezvous": "the job could not start: store/rendezvous timeout, a rank never joined, port in use",
    "nccl_timeout": "ProcessGroupNCCL watchdog caught a collective timeout",
    "work_state": "ProcessGroupNCCL: last enqueued / completed work at the failure",
    "dump_signal": "ProcessGroupNCCL: a peer's timeout triggered a Flight Recorder dump",
    "gloo_timeout": "gloo: timed out waiting for a send/recv",
    "peer_error": "a peer closed the connection, broken pipe, ncclRemoteError",
    "nccl_warn": "any other NCCL WARN line",
    "nccl_error": "an NCCL error code (ncclSystemError, ncclInternalError, ncclUnhandledCudaError, …)",
    "torchrun_root": "torchrun's 'Root Cause (first observed failure)' entry",
    "torchrun_failure": "another entry of torchrun's failure summary",
    "stuck": "ddpdoctor run: no step progress while a peer rank has stopped",
    "progress": "a training progress line (step N, iter N, a tqdm bar) or an events.jsonl step",
    "network": "a bootstrap / interface / transport fault (missing interface, subnet, bind, connect, IB, P2P)",
    "net_setting": "NCCL reports a *_SOCKET_IFNAME value set in the environment",
    "usage_error": "an argparse/click usage error (the program exits with code 2)",
    "monitored_barrier": "monitoredBarrier names ranks that never arrived",
}


@dataclass
class NcclFacts:
    version: str | None = None
    versions_by_host: dict = field(default_factory=dict)  # host -> `NCCL version …` its NCCL printed
    transport: str | None = None  # "Socket", "IB", … (from "Using network X")
    ib_present: bool | None = None  # True: IB devices listed; False: "No device found"
    ib_devices: list[str] = field(default_factory=list)
    ibverbs_missing: bool = False
    socket_ifnames: list[str] = field(default_factory=list)  # NET/Socket interfaces chosen
    bootstrap_ifnames: list[str] = field(default_factory=list)
    ifnames_by_host: dict[str, list[str]] = field(default_factory=dict)
    addrs_by_ifname: dict[str, list[str]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    paths: list[dict] = field(default_factory=list)  # {"src","dst","via","type","host","channel"}
    gdr: bool | None = None  # GPU Direct RDMA enabled anywhere / disabled
    nvlink_seen: bool = False  # NVLink / NVL mentioned in the topology dump
    p2p_disabled: bool = False
    topo_file: str | None = None  # NCCL_TOPO_FILE as NCCL reported it set by environment
    graph_file: str | None = None  # NCCL_GRAPH_FILE likewise
    nranks: int | None = None
    nnodes: int | None = None
    rings: int = 0
    trees: int = 0
    pid_rank: dict[str, int] = field(default_factory=dict)  # "host:pid" -> global rank
    pid_dev: dict[str, int] = field(default_factory=dict)  # "host:pid" -> CUDA device
    lines: int = 0

    @property
    def present(self) -> bool:
        return self.lines > 0

    def path_types(self, kind: str) -> list[dict]:
        return [p for p in self.paths if p["type"] == kind]

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["present"] = self.present
        return d


def label(path: Path | str) -> str:
    return str(path)


_WS = re.compile(r"\s+")


def norm(text: str) -> str:
    return _WS.sub(" ", text).strip()
