"""Errors the user caused: reported as one line with exit code 2, never a traceback."""


class InputError(Exception):
    """Bad or unusable input (path, file, trace).  The message is shown as is."""

    exit_code = 2


class NoTracesError(InputError):
    """The inputs hold no usable profiler trace (they may still hold logs)."""
