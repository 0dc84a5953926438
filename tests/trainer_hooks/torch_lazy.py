"""torch for the trainer-hook tests, imported when a test runs, never when a file is collected.

Every xdist worker collects every test file; a file that imports torch at its top (``import torch``,
``pytest.importorskip("torch")``) makes each worker spend ~1.5-1.9 CPU-s on it, though one worker
runs the file. ``needs_torch`` skips a file where torch is missing without importing it.
"""

from __future__ import annotations

import importlib.util

import pytest

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


def poet_libs():
    """torch, POET and the reference trainer (both import torch)."""
    import torch

    from faultlens.trainer_hooks import poet
    from faultlens.trainer_hooks import reference_trainer as rt

    return torch, poet, rt
