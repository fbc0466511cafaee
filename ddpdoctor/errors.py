"""Errors the user caused: reported as one line with exit code 2, never a traceback.

Exit codes of every command (README, "Exit codes"): 0 done; 1 internal error, a failed
`rules test`, or `compare` over its regression limit; 2 bad input; 3 `analyze` found that the
run itself failed (a crash, an OOM, a timeout); 4 `analyze` could not reach the Dask scheduler
(`--scheduler`) or the store behind a URL input; 130 interrupted.  `run` exits with the
training's own exit code."""

FAILED_RUN = 3


class InputError(Exception):
    """Bad or unusable input (path, file, trace).  The message is shown as is."""

    exit_code = 2


class NoTracesError(InputError):
    """The inputs hold no usable profiler trace (they may still hold logs)."""


class UnreachableError(InputError):
    """A service the user pointed to (a Dask scheduler, an object store) cannot be reached or refused us."""

    exit_code = 4
