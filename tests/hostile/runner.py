"""Run many ddpdoctor commands in one process: each in a forked child under a wall-clock
timeout and an address-space cap (RLIMIT_AS), stdout/stderr to files.  Reads a JSON list
of cases on stdin ({id, argv, cwd, out_dir, timeout_s, mem_mb, env}); writes one JSON result
per case on stdout (rc, seconds, peak RSS MiB, timed_out)."""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time


def _vm_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def run_case(case: dict, base_vm: int) -> dict:
    from ddpdoctor.cli import main

    out_dir = case["out_dir"]
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.chdir(case["cwd"])
            os.environ.update(case.get("env") or {})
            cap = base_vm + case["mem_mb"] * (1 << 20)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            for fd, name in ((1, "stdout"), (2, "stderr")):
                f = os.open(os.path.join(out_dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(f, fd)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.stdout = os.fdopen(1, "w", buffering=1)
            sys.stderr = os.fdopen(2, "w", buffering=1)
            try:
                main(args=case["argv"], prog_name="ddpdoctor", standalone_mode=True)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        except BaseException:  # noqa: BLE001 - show it to the test
            import traceback

            traceback.print_exc()
            os._exit(99)
    deadline = t0 + case["timeout_s"]
    timed_out = False
    while True:
        wpid, status, ru = os.wait4(pid, os.WNOHANG)
        if wpid:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            timed_out = True
            wpid, status, ru = os.wait4(pid, 0)
            break
        time.sleep(0.02)
    rc = os.waitstatus_to_exitcode(status)
    return {
        "id": case["id"],
        "rc": rc,
        "seconds": round(time.monotonic() - t0, 2),
        "peak_mib": round(ru.ru_maxrss / 1024, 1),
        "timed_out": timed_out,
    }


def main() -> None:
    cases = json.load(sys.stdin)
    import ddpdoctor.cli
    import ddpdoctor.diagnosis
    import ddpdoctor.report.html
    import ddpdoctor.report.plots  # noqa: F401

    try:
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        pass
    base_vm = _vm_bytes()
    for case in cases:
        print(json.dumps(run_case(case, base_vm)), flush=True)


if __name__ == "__main__":
    main()
