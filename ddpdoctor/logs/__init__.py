"""Failure diagnosis from logs: per-rank log lines, NCCL INFO, torchrun's summary, Flight Recorder dumps.

Never imports torch (except, lazily, torch's Flight Recorder analyzer when dumps are present).
"""

from .analyze import LogAnalysis, analyze_logs
from .discover import find_log_files
from .model import LogEvent, NcclFacts

__all__ = ["LogAnalysis", "LogEvent", "NcclFacts", "analyze_logs", "find_log_files"]
