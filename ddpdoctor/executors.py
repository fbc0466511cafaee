"""Where the per-rank work of ``analyze`` runs: in this process, in local worker processes, or on a
Dask distributed cluster (``analyze --scheduler tcp://host:8786``).

Every executor takes the same picklable function and tasks and returns the function's results in
completion order; ``on_result`` is called as each one arrives (the progress display).  A task is
one rank's files, so what crosses a process or network boundary is a few file records going out
and one compact ``RankSummary`` coming back, never raw events.

Dask is an optional extra (``pip install 'ddpdoctor[dask]'``), imported only when a scheduler is
given.  Its workers open the files themselves, so the paths must be reachable from them: a shared
filesystem mounted at the same place, or URLs (``s3://…``, see sources.py).
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Callable

from .errors import InputError, UnreachableError

SCHEDULER_TIMEOUT_S = 5  # connecting to a scheduler: seconds before "cannot reach"
DASK_INSTALL_HINT = "pip install 'ddpdoctor[dask]'"


def in_process(fn: Callable, tasks: list, on_result: Callable | None = None) -> list:
    results = []
    for t in tasks:
        results.append(fn(t))
        if on_result:
            on_result(results[-1])
    return results


def local_processes(fn: Callable, tasks: list, jobs: int, on_result: Callable | None = None) -> list:
    """A fork pool of ``jobs`` processes (fork: the workers start without re-importing anything)."""
    results = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        for res in pool.map(fn, tasks):
            results.append(res)
            if on_result:
                on_result(res)
    return results


def connect(address: str, timeout: float = SCHEDULER_TIMEOUT_S):
    """A ``distributed.Client`` on ``address``, or a one-line error: the extra is missing (exit 2) or the
    scheduler does not answer within ``timeout`` seconds (exit 4)."""
    try:
        from distributed import Client
        from distributed.comm.addressing import parse_address, parse_host_port
        from distributed.comm.registry import backends
    except ImportError:
        raise InputError(f"--scheduler needs Dask's distributed, an optional extra: {DASK_INSTALL_HINT}") from None
    try:
        scheme, loc = parse_address(address)
        if scheme not in backends:
            raise ValueError(f"unknown scheme {scheme}://, known: {', '.join(sorted(backends))}")
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(loc)
    except ValueError as exc:  # checked first: a Client on a bad address waits, then fails noisily
        raise InputError(f"--scheduler {address!r} is not a scheduler address ({exc}); e.g. tcp://host:8786") from None
    quiet = [
        logging.getLogger(n) for n in ("distributed", "distributed.client", "distributed.core", "distributed.comm")
    ]
    levels = [lg.level for lg in quiet]
    for lg in quiet:
        lg.setLevel(logging.CRITICAL)  # its retry warnings are the error line below, said once
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise UnreachableError(
            f"cannot reach the Dask scheduler at {address} within {timeout:g} s "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
        ) from None
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)


def dask_cluster(fn: Callable, tasks: list, address: str, on_result: Callable | None = None) -> list:
    """Each task on the cluster at ``address``; results gathered as they finish."""
    client = connect(address)
    from distributed import as_completed

    results = []
    try:
        futures = client.map(fn, tasks, pure=False)
        for fut in as_completed(futures, loop=client.loop):
            try:
                res = fut.result()
            except ImportError as exc:
                raise UnreachableError(
                    f"a Dask worker at {address} cannot run ddpdoctor ({exc}): install the "
                    "same ddpdoctor version on the workers"
                ) from None
            results.append(res)
            if on_result:
                on_result(res)
    finally:
        client.close()
    return results
