"""Regular expressions for the messages we recognize (PyTorch c10d, gloo, NCCL, torchrun, Python)."""

import re

I = re.IGNORECASE

OOM = re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|"
                 r"Cuda failure .*out of memory|HIP out of memory|cudaErrorMemoryAllocation", I)
OOM_ALLOC = re.compile(r"Tried to allocate ([\d.]+ ?[KMGT]i?B)")
OOM_GPU = re.compile(r"GPU (\d+) has a total capac\w* of ([\d.]+ ?[KMGT]i?B)")

WATCHDOG = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\((?P<args>[^)]*\)?[^)]*)\)"
                      r"(?: ran for (?P<ran>\d+) milliseconds)?")
WORK_ARG = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\)|TensorShape|DataType)=([^,)]+)")
RANK_IN_MSG = re.compile(r"\[(?:PG (?:ID )?(?P<pg>\d+)[^\]]*?)?Rank (?P<rank>\d+)\]")
WORK_STATE = re.compile(r"(?:detected by watchdog at work|Timeout at NCCL work): (?P<at>\d+), last enqueued NCCL work: "
                        r"(?P<enq>-?\d+), last completed NCCL work: (?P<done>-?\d+)")
DUMP_SIGNAL = re.compile(r"Received a dump signal due to a collective timeout from\s+(?:rank (?P<rank>\d+)|this local rank)", I)
TEARDOWN = re.compile(r"Some NCCL operations have failed or timed out|taking the entire process down", I)

GLOO_TIMEOUT = re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<op>\w+) operation|"
                          r"Application timeout caused pair closure|"
                          r"Timed out (?:waiting|after) .*?(?:gloo|recv|send)", I)
RENDEZVOUS = re.compile(r"Timed out after (?P<s>\d+) seconds waiting for clients\. (?P<joined>\d+)/(?P<expected>\d+) clients joined|"
                        r"client socket has timed out after (?P<ms>\S+?) while trying to connect to \((?P<addr>[^,]+), (?P<port>\d+)\)|"
                        r"server socket has failed to (?:listen|bind)[^.]*|Address already in use|RendezvousTimeoutError|"
                        r"Timed out initializing process group in store based barrier|"
                        r"RendezvousConnectionError|Connection refused.*(?:29500|MASTER_ADDR|store)", I)
PEER = re.compile(r"Connection closed by (?:remote )?peer|Connection reset by peer|Broken pipe|ncclRemoteError|"
                  r"remote process exited or there was a network error|retcode 6\b|Connection refused.*(?:gloo|NCCL)|"
                  r"NCCL communicator was aborted on rank (\d+)|ProcessGroupGloo.*(?:peer|closed)", I)
PEER_ADDR = re.compile(r"(?:from |peer |\[)(\d{1,3}(?:\.\d{1,3}){3})\]?[:<](\d+)")
PEER_RANK = re.compile(r"(?:from|to|with) (?:peer )?rank (\d+)", I)
NCCL_ERR = re.compile(r"\b(ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclInvalidUsage|ncclInvalidArgument|"
                      r"ncclRemoteError)\b|NCCL error in:")

MISMATCH = re.compile(r"Detected mismatch between collectives on ranks\. Rank (?P<r1>\d+) is running collective: "
                      r"CollectiveFingerPrint\((?P<f1>.*?)\),? but Rank (?P<r2>\d+) is running collective: "
                      r"CollectiveFingerPrint\((?P<f2>[^()]*(?:\([^()]*\)[^()]*)*)\)(?P<rest>.*)$")
DIFFER = re.compile(r"Collectives differ in the following aspects:\s*(.*)$")
# a line that looks like program output rather than prose pasted around it in a ticket
LOGGY = re.compile(r"\w*(?:Error|Exception)\s*:|\b(?:WARN|ERROR|FATAL)\b|\.(?:cc|cpp|h|hpp):\d+|ProcessGroup|"
                   r"\[Rank \d+\]|\bNCCL\b.*\b(?:failed|error)\b|^\s*CUDA (?:error: )?out of memory")
FP_KEYS = re.compile(r"(SequenceNumber|OpType|TensorShape|TensorShapes|TensorDtypes|TensorDeviceTypes|NumTensors)=")

EXC_LINE = re.compile(r"^\s*(?!raise\b|File\b|return\b)(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure))"
                      r"(?::\s?(?P<msg>.*))?$")
TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):\s*$")

SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\) received by PID (?P<pid>\d+)|"
                    r"terminated with signal (?P<name2>SIG\w+)|died with <Signals\.(?P<name3>SIG\w+): (?P<num3>\d+)>|"
                    r"(?:^|\s)Killed(?:\s+\S*python\S*.*)?$|exit(?:ed with)? (?:code|status) (?P<code>137|139)\b", I)
CRASH = re.compile(r"Segmentation fault|SIGSEGV|Fatal Python error|core dumped|SIGABRT|terminate called after throwing", I)

TR_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)")
TR_ROOT = re.compile(r"^\s*Root Cause \(first observed failure\):")
TR_FAILURES = re.compile(r"^\s*Failures:\s*$")
TR_ENTRY = re.compile(r"^\s*\[(\d+)\]:\s*$")
TR_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
TR_RANK = re.compile(r"(-?\d+) \(local_rank: (\d+)\)")
TR_EXIT = re.compile(r"(-?\d+) \(pid: (\d+)\)(?:\s*\((SIG\w+)\))?")
TR_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})_(\d{2}):(\d{2}):(\d{2})")
TR_RULE = re.compile(r"^\s*={20,}\s*$")
CLOSING_SIGNAL = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")

PROGRESS = [
    re.compile(r"^\s*(?:epoch\s*[:=]?\s*\[?\d+\]?\s*[,|/:\-]?\s*)?(?:global[_ ]?)?(?:step|iter|iteration|it|batch)\s*[:=#]?\s*"
               r"\[?(?P<step>\d+)\b(?!\.\d)", I),
    re.compile(r"(?P<step>\d+)/(?P<total>\d+) \[\d+:\d+"),          # tqdm progress bar
    re.compile(r"\bglobal_step[=:]\s*(?P<step>\d+)\b"),
]

SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
SIGNUM = {v: k for k, v in SIGNALS.items()}

# a glued second message inside one line (a tqdm bar without newline followed by a c10d error)
GLUED = re.compile(r"(?<=[^\s:])(?=\[[IWEF]\d* ?[\d:. ]*[\w.]+\.(?:cpp|hpp|cc|h):\d+\])|(?<=[^\s:])(?=\[rank\d+\]:\[)")
# one cheap search that every line worth classifying matches (a superset of the patterns above)
ANY = re.compile(r"memory|Watchdog|work|dump signal|mismatch|Timed out|timeout|peer|pipe|nccl|exitcode|Signal|Kill|"
                 r"Segmentation|SIG|Traceback|Error|Exception|Interrupt|Exit|Failure|Fatal|core dumped|terminate|"
                 r"step|iter|epoch|batch|\bit\b|\d+/\d+ \[|retcode", I)
