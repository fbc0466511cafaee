"""ddpdoctor: why is my PyTorch DDP training slow, and what to change.

The Python API (stable; README "Python API")::

    import ddpdoctor
    doc = ddpdoctor.analyze("ddpdoctor-out-20260101-120000")   # a bundle, traces, logs
    doc.verdict.bottleneck, [f.rule for f in doc.findings]
    doc.to_dict()                     # exactly report.json
    doc.render("markdown")            # or "terminal", "html"
    ddpdoctor.load("ticket.tar.gz")   # a report.json, report folder or `ddpdoctor bundle` archive
    ddpdoctor.compare(before, after)  # Documents, dicts or paths

Errors are exceptions whose ``exit_code`` is the CLI's: InputError 2, FailedRunError 3,
UnreachableError 4.  Importing ddpdoctor imports neither torch nor numpy, pandas or matplotlib.
"""

from .api import Comparison, Document, analyze, compare, load
from .errors import DDPDoctorError, FailedRunError, InputError, NoTracesError, UnreachableError
from .version import __version__

__all__ = [
    "analyze",
    "load",
    "compare",
    "Document",
    "Comparison",
    "DDPDoctorError",
    "InputError",
    "NoTracesError",
    "FailedRunError",
    "UnreachableError",
    "__version__",
]
