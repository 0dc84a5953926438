"""Fault history: the DuckDB sink and the report."""

# One name per module (docs/CONTRIBUTING.md, "Layout"): from the repository root this folder is also
# importable by its bare name, which would load a second copy of every module in it (a second enum,
# an exception class that the other copy's `except` misses).
if not __name__.startswith("faultlens."):
    raise ImportError(f"{__name__} is faultlens.{__name__}: import it, or run it with python -m, by that name "
                      "(one name per module: docs/CONTRIBUTING.md, Layout)")
