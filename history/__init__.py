"""Fault history: the DuckDB sink and the report."""
