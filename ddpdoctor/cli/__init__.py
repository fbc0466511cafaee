"""The command line (click wiring only): ``commands`` (the group and analyze, report, schema, bundle,
compare), ``rules``, ``run``, ``tune`` (one module per command family) and ``options`` (what they share).
``ddpdoctor`` (the console script) and ``python -m ddpdoctor`` run :func:`main`."""

from .commands import main

__all__ = ["main"]
