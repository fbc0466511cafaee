"""Errors the user caused: reported as one line with exit code 2, never a traceback.

Exit codes of every command (README, "Exit codes"): 0 done; 1 internal error, a failed
`rules test`, or `compare` over its regression limit; 2 bad input; 3 `analyze` found that the
run itself failed (a crash, an OOM, a timeout); 4 `analyze` could not reach the Dask scheduler
(`--scheduler`) or the store behind a URL input; 130 interrupted.  `run` exits with the
training's own exit code."""

FAILED_RUN = 3


class DDPDoctorError(Exception):
    """Base of every error ddpdoctor raises on purpose; ``exit_code`` is the CLI's for the same problem."""

    exit_code = 1


class InputError(DDPDoctorError):
    """Bad or unusable input (path, file, trace).  The message is shown as is."""

    exit_code = 2


class NoTracesError(InputError):
    """The inputs hold no usable profiler trace (they may still hold logs)."""


class UnreachableError(InputError):
    """A service the user pointed to (a Dask scheduler, an object store) cannot be reached or refused us."""

    exit_code = 4


class FailedRunError(DDPDoctorError):
    """The run itself failed (a crash, an OOM, a timeout): ``analyze``'s exit code 3.  Raised by the
    Python API only when asked (``ddpdoctor.analyze(..., check=True)``, ``Document.raise_for_failure()``);
    the diagnosis is in ``.document``."""

    exit_code = FAILED_RUN

    def __init__(self, document):
        self.document = document
        summary = (document.to_dict().get("verdict") or {}).get("summary") or "the run failed"
        super().__init__(summary)


def as_input_error(exc: BaseException) -> InputError | None:
    """The one translation of what bad input raises deep in a decoder into the user's one line (exit code 2),
    shared by the CLI (cli._Group) and the API (api._translated_errors); None for anything else."""
    if isinstance(exc, InputError):
        return exc
    if isinstance(exc, RecursionError):
        return InputError("input nested too deeply to decode")
    if isinstance(exc, OverflowError):
        return InputError(f"input holds a number too large to use ({exc})")
    if isinstance(exc, UnicodeDecodeError):
        return InputError(f"input is not valid UTF-8 text (byte {exc.start})")
    if isinstance(exc, MemoryError):
        return InputError("out of memory reading the input (see docs/REFERENCE.md: hostile inputs and limits)")
    return None
