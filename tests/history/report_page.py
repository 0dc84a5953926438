"""The HTML report's page for the tests that read it, its module imported when a page is made.

faultlens.history.html_report imports matplotlib and pandas (history/plots.py) at its top, ~1 CPU-s;
every xdist worker collects every test file, one worker runs a file: imported at the top of four test
files, each worker paid it at collection."""

from __future__ import annotations

from typing import Any


def render(conn: Any, **kwargs: Any) -> str:
    """``faultlens.history.html_report.render`` itself, called as the report command calls it."""
    from faultlens.history.html_report import render as page

    return page(conn, **kwargs)
