"""Regular expressions for the messages we recognize (PyTorch c10d, gloo, NCCL, torchrun, Python)."""

import re

from .catalogue import message_patterns

I = re.IGNORECASE  # noqa: E741 - the flag as re spells it (re.I), used in every pattern below


# pattern text -> the catalogue entry it was built from (tests/test_logs_wording.py: every other regex here is
# format, named in that test's list)
FROM_CATALOGUE: dict[str, str] = {}


def _catalogued(
    msg_id: str, flags: int = 0, first: int | None = None, at: int | None = None, parse: bool = False
) -> re.Pattern:
    """A message's wording from the message catalogue (rules/messages/): one place holds it; this module keeps
    only the structure around it (prefixes, ranks, tracebacks). `first`: its first patterns only; `at`: the one
    pattern at that index (an entry whose `parse` list holds the parts of one report); `parse`: the entry's
    `parse` wording (the form the parser reads, with its groups) instead of the patterns the message engine
    searches."""
    pats = message_patterns(msg_id, parse=parse)
    pats = [pats[at]] if at is not None else pats[:first]
    rx = re.compile("|".join(f"(?i:{p[4:]})" if p.startswith("(?i)") else f"(?:{p})" for p in pats), flags)
    FROM_CATALOGUE[rx.pattern] = msg_id
    return rx


def _wording(msg_id: str, at: int | None = None) -> re.Pattern:
    """An entry's `parse` wording (whole, or the one pattern at `at`)."""
    return _catalogued(msg_id, at=at, parse=True)


OOM = _catalogued("cuda.out_of_memory", I)


class _Found:
    """A match of one catalogue pattern: groups that pattern does not define read as None."""

    def __init__(self, m: re.Match):
        self.m = m

    def group(self, name=0):
        if name == 0 or name in self.m.re.groupindex:
            return self.m.group(name)
        return None


class _Catalogued:
    """Several catalogue entries' patterns searched in turn (their named groups may repeat across entries)."""

    def __init__(self, ids: tuple[str, ...], flags: int = 0):
        self.patterns = [
            re.compile(p[4:] if p.startswith("(?i)") else p, flags | (I if p.startswith("(?i)") else 0))
            for i in ids
            for p in message_patterns(i)
        ]

    def search(self, text: str) -> _Found | None:
        for p in self.patterns:
            m = p.search(text)
            if m:
                return _Found(m)
        return None


OOM_ALLOC = _wording("cuda.out_of_memory", at=0)  # the size it tried to allocate
OOM_GPU = _wording("cuda.out_of_memory", at=1)  # the GPU and its capacity

# the watchdog's report (groups args/ran, or args2/ran2 when its first words were cut off or wrapped)
WATCHDOG = _wording("pg_nccl.watchdog_timeout", at=0)
WATCHDOG_THREAD_ENDED = _wording("pg_nccl.watchdog_timeout", at=1)  # the watchdog thread ended the process
WORK_ARG = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\)|TensorShape|DataType)=([^,)]+)")
RANK_IN_MSG = re.compile(r"\[(?:PG (?:ID )?(?P<pg>\d+)[^\]]*?)?Rank (?P<rank>\d+)\]")
WORK_STATE = _wording("pg_nccl.work_state")  # groups at, enq, done
TEARDOWN = _catalogued("pg_nccl.teardown", I)
ILLEGAL_ACCESS = _wording("nccl.cuda.illegal_memory_access")  # searched in lower-cased text

# the store / rendezvous messages, one catalogue entry after another (their groups: joined, expected, seconds,
# addr, port)
RENDEZVOUS = _Catalogued(
    (
        "c10d.store.clients_not_joined",
        "c10d.store.wait_timeout",
        "c10d.store.client_connect_timeout",
        "c10d.store.port_in_use",
        "c10d.store.server_listen_failed",
        "c10d.store.rendezvous_timeout",
        "c10d.store.rendezvous_closed",
    ),
    I,
)
# gloo's timeouts (unbound_buffer.cc "Timed out waiting <N>ms for <op> operation to complete", pair closure)
GLOO_TIMEOUT = _Catalogued(("gloo.timeout",), I)
DUMP_SIGNAL = _Catalogued(("pg_nccl.dump_signal",), I)
# transport faults the network rule names: NCCL's IB (net_ib.cc, ibvwrap.cc) and P2P / CUDA IPC (p2p.cc) messages
NET_IB = _Catalogued(
    (
        "nccl.ib.completion_error",
        "nccl.ib.async_event",
        "nccl.ib.verbs_call_failed",
        "nccl.ib.device_open_failed",
        "nccl.ib.link_type_mismatch",
    ),
    I,
)
NET_P2P = _Catalogued(("nccl.p2p.ipc_failed", "nccl.p2p.mapping_exhausted"), I)
PEER = _wording("net.peer_closed")
PEER_ADDR = re.compile(r"(?:from |peer |\[)(\d{1,3}(?:\.\d{1,3}){3})\]?[:<](\d+)")
PEER_RANK = re.compile(r"(?:from|to|with) (?:peer )?rank (\d+)", I)
NCCL_ERR = _wording("net.nccl_error_code")

# ProcessGroupWrapper's desync report, its parts in the order of the entry's parse list
_DESYNC = "pg_wrapper.collectives_mismatch"
DESYNC = _wording(_DESYNC, at=0)  # the report's opening words
FP_RANK = _wording(_DESYNC, at=1)  # "Rank N is running collective: CollectiveFingerPrint("
BARE_OP = _wording(_DESYNC, at=2)  # older: "but Rank 1 is running collective: REDUCE."
DIFFER = _wording(_DESYNC, at=3)  # "Collectives differ in the following aspects: …"
SEQ_DIFF = _wording(_DESYNC, at=4)  # "Sequence number: 5vs 6"
OP_DIFF = _wording(_DESYNC, at=5)  # "Op type: ALLREDUCEvs BROADCAST"
# a line that looks like program output rather than prose pasted around it in a ticket
LOGGY = re.compile(
    r"\w*(?:Error|Exception)\s*:|\b(?:WARN|ERROR|FATAL)\b|\.(?:cc|cpp|h|hpp):\d+|ProcessGroup|"
    r"\[Rank \d+\]|\bNCCL\b.*\b(?:failed|error)\b|^\s*CUDA (?:error: )?out of memory"
)
# (a pasted report may wrap a line between a key and its "=": "TensorShape\n=[41, 256]")
FP_KEYS = re.compile(r"(SequenceNumber|OpType|TensorShape|TensorShapes|TensorDtypes|TensorDeviceTypes|NumTensors)\s*=")

EXC_LINE = re.compile(
    r"^\s*(?!raise\b|File\b|return\b)(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure))"
    r"(?::\s?(?P<msg>.*))?$"
)
TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):\s*$")

# a process's death (rules/messages/process_exit.toml): the signal that stopped it, whoever reported it (groups
# num/name, name2, name3/num3, num4, code, oomkill)
SIGNAL = _wording("process.killed_by_signal")
# torch.utils.data's own report that a worker process died (usually the kernel OOM killer: SIGKILL)
DL_WORKER_KILLED = _wording("dataloader.worker_killed_by_signal")
# std::terminate's report of an uncaught C++ exception (libstdc++'s verbose terminate handler), its what() line,
# the abort after it
CXX_TERMINATE = _wording("process.uncaught_cxx_exception", at=0)
CXX_WHAT = _wording("process.uncaught_cxx_exception", at=1)
CXX_ABORT = _wording("process.uncaught_cxx_exception", at=2)
CRASH = _wording("process.native_crash", at=0)
CRASH_NOT_ABORT = _wording("process.native_crash", at=1)  # a crash that is not a plain abort
ABORT = _wording("process.aborted")

TR_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)")
TR_ROOT = re.compile(r"^\s*Root Cause \(first observed failure\):")
TR_FAILURES = re.compile(r"^\s*Failures:\s*$")
TR_ENTRY = re.compile(r"^\s*\[(\d+)\]:\s*$")
TR_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
TR_RANK = re.compile(r"(-?\d+) \(local_rank: (\d+)\)")
TR_EXIT = re.compile(r"(-?\d+) \(pid: (\d+)\)(?:\s*\((SIG\w+)\))?")
TR_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})_(\d{2}):(\d{2}):(\d{2})")
TR_RULE = re.compile(r"^\s*={20,}\s*$")

PROGRESS = [
    re.compile(
        r"^\s*(?:epoch\s*[:=]?\s*\[?\d+\]?\s*[,|/:\-]?\s*)?(?:global[_ ]?)?(?:step|iter|iteration|it|batch)\s*[:=#]?\s*"
        r"\[?(?P<step>\d+)\b(?!\.\d)",
        I,
    ),
    re.compile(r"(?P<step>\d+)/(?P<total>\d+) \[\d+:\d+"),  # tqdm progress bar
    re.compile(r"\bglobal_step[=:]\s*(?P<step>\d+)\b"),
]

SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}

# a glued second message inside one line (a tqdm bar without newline followed by a c10d error)
GLUED = re.compile(
    r"(?<=[^\s:])(?=\[[IWEF]\d* ?[\d:. ]*[\w.]+\.(?:cpp|hpp|cc|h):\d+\])|(?<=[^\s:])(?=\[rank\d+\]:\[)|"
    # a torchrun --tee prefix glued to the previous rank's progress bar: "…examples/s][default2]:[E …"
    r"(?<=[^\s:])(?=\[(?!rank\d)[A-Za-z_][\w\-]*?\d+\]:)"
)
# one cheap search that every line worth classifying matches (a superset of the patterns above)
ANY = re.compile(
    r"memory|Watchdog|work|dump signal|mismatch|Timed out|timeout|peer|pipe|nccl|exitcode|Signal|Kill|"
    r"Segmentation|SIG|Traceback|Error|Exception|Interrupt|Exit|Failure|Fatal|core dumped|terminate|"
    r"step|iter|epoch|batch|\bit\b|\d+/\d+ \[|retcode",
    I,
)

# ---------------------------------------------------------------- network, bootstrap, transports
# NCCL (bootstrap.cc, socket.cc, net_socket.cc, net_ib.cc), gloo (tcp/device.cc, pair.cc) and c10d (TCPStore)
NET_IFNAME_SET = re.compile(r"(NCCL|GLOO|TP)_SOCKET_IFNAME set(?: by environment)? to (?P<val>\S+)")
NET_MISSING_IF = _wording("net.interface_missing")  # groups gloo_if, remote, boot
# gloo (tcp/device.cc): the host name resolves to no local address, so gloo binds to and advertises 127.0.0.1
NET_LOOPBACK = _catalogued("gloo.loopback_fallback", I)
# gloo's full-mesh connect failing (the RuntimeError line often elides the reason)
GLOO_MESH = _catalogued("gloo.connect_full_mesh", I)
GLOO_REMOTE = re.compile(r"remote=\[(\d{1,3}(?:\.\d{1,3}){3})\]")
GLOO_SELF_RANK = re.compile(r"\(rank=(\d+), size=\d+")
# NCCL's ncclSystemError as old c10d printed it: a system call (socket, shared memory) failed in NCCL init
NCCL_SYSTEM = _catalogued("nccl.error.unhandled_system")
# torch.multiprocessing.spawn's report of a dead child: its index is the rank mp.spawn gave it
SPAWN_EXIT = _wording("process.spawn_terminated")
# DDP's reducer error, also quoted without its "RuntimeError:" prefix
DDP_UNUSED = _catalogued("ddp.unused_parameters", first=1)
NET_BIND = _wording("net.bind_failed")  # groups why, why2
NET_CONNECT = _wording("net.connect_failed")  # group why
NET_WORDS = (
    "find address",
    "find interface",
    "interface found",
    "same subnet",
    "bind",
    "ibv_",
    "net/ib",
    "ibv_wc",
    "connect",
    "socket_ifname",
    "af_inet",
    "address family",
    "ipc",
    "peer access",
    "peer mapping",
    "p2p/",
    "p2p.cc",
    "loopback",
    "connectfullmesh",
    "system error",
    "bootstrap.c",
)
# NCCL's error-return trace (NCCL_DEBUG=INFO) through its bootstrap, the TCP sockets between the ranks over the
# bootstrap interface: "bootstrap.cc:270 -> 2" (2 ncclSystemError, 3 ncclInternalError, 6 ncclRemoteError)
NCCL_BOOT_TRACE = re.compile(r"\bbootstrap\.cc?u?:\d+ -> (?P<code>[236])\b")
TRANSPORT_P2P = re.compile(r"via (?:P2P|direct pointer|direct shared memory|SHM|NET/\w+)", I)

# TORCH_DISTRIBUTED_DEBUG=DETAIL/INFO and DDP's own model checks
MONITORED = _catalogued("pg_gloo.monitored_barrier", I)
DDP_MODEL_MISMATCH = _catalogued("ddp.params_differ_across_ranks", I)
SHAPE_VERIFY = _wording("pg_wrapper.shape_mismatch")

# argparse (and click) usage errors: "prog.py: error: the following arguments are required: --mode"
USAGE_ERROR = _wording("program.usage_error")  # groups prog, msg
# Python cannot open the script (startup.py); a port already in use (failure_sections.py)
CANT_OPEN = _wording("program.cant_open_script")  # groups interp, q, path, errno, reason
ADDRESS_IN_USE = _wording("net.address_in_use")
ANY_NET = re.compile(
    r"address|interface|subnet|bind|ibv|completion|monitoredBarrier|DDP expects|verifying shape|bootstrap\.c|"
    r"connect|SOCKET_IFNAME|error:|AF_INET|IPC|peer access|P2P/|loopback",
    I,
)
# "NET/Socket : Using" with the interfaces on the following lines ("[0]bond0:192.168.1.161<0>")
USING_OPEN = re.compile(r"(?:NET/Socket|Bootstrap) : Using\s*$")
IFACE_LIST = re.compile(r"^\s*(?:\[\d+\][A-Za-z][\w.\-]*:\S+<\d+>\s*)+$")
