"""Python's compiled modules cached for the suite, and compiled once before the xdist workers start.

Every worker collects every test file: pytest rewrites each one's asserts and compiles it, and the
faultlens modules they import are compiled too, unless a cache of compiled modules holds them. Where
the environment turns that cache off (PYTHONDONTWRITEBYTECODE, as this project's sandboxes do), it is
turned on in a folder of the system's temp (no __pycache__ lands in the checkout), or in the
run's own PYTHONPYCACHEPREFIX. The environment is inherited by the workers and by every
process a test starts: `python -m faultlens analyze --help` took 0.81 CPU-s without the cache, 0.58
with it (medians of 8).

A cache filled by the workers themselves fills too late: on a fresh checkout the seven workers
collect at once and each compiles everything. So the controller of a distributed run first collects
the same paths in one child process (`--collect-only`, no workers), which fills it. Seven workers
collecting the suite and running none of it (`pytest -k NO_SUCH_TEST`, this 2-core machine shared):
206-224 CPU-s without the cache, 189 with it filled by the workers, 78 with this child on an empty
cache, 56 with the cache warm.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


def _turn_the_cache_on() -> None:
    if sys.dont_write_bytecode:
        prefix = os.environ.get("PYTHONPYCACHEPREFIX") or str(Path(tempfile.gettempdir()) / f"faultlens-tests-pyc-{os.getuid()}")
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = prefix
        sys.dont_write_bytecode, sys.pycache_prefix = False, prefix


_turn_the_cache_on()  # at import: before the workers are started, which inherit the environment


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if sys.dont_write_bytecode or not config.pluginmanager.has_plugin("dsession"):
        return  # no cache to fill, or no workers (xdist's DSession starts them after this hook)
    # addopts emptied: no workers in the child, and nothing run; what it prints is of no use.
    subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts=", "-p", "no:cacheprovider", *config.args],
        cwd=config.invocation_params.dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
