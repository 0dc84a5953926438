"""faultlens: find the fault in a large GPU training job, name the machines to blame, tell the trainer what to do."""

__version__ = "0.1.0"
