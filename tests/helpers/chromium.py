"""Headless Chromium for the tests that check what a browser makes of the HTML report.

CI installs Debian's ``chromium`` (best effort, .ci/run); where it is missing those tests skip and say so.
"""

from __future__ import annotations

import shutil

import pytest


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


needs_chromium = pytest.mark.skipif(chromium() is None,
                                    reason="no headless Chromium here (Debian: apt-get install chromium)")
