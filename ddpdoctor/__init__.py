"""ddpdoctor: why is my PyTorch DDP training slow, and what to change."""

__version__ = "0.1.0"
