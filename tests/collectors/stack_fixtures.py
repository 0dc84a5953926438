"""A stand-in training job for stack-capture tests: a launcher with two ranks (RANK 8 and 9),
each with a child of its own that carries the same environment (a DataLoader worker)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

RANK_FUNCTION = "train_step_waiting_in_allreduce"

_RANK = f"""
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
def {RANK_FUNCTION}():
    time.sleep(120)
{RANK_FUNCTION}()
"""
_LAUNCHER = """
import os, subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", sys.argv[1]], env={**os.environ, "RANK": str(8 + r), "LOCAL_RANK": str(r)})
        for r in range(2)]
print("ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def launcher():
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, _RANK], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    # Until both ranks have started their worker child: the tree is complete.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(psutil.Process(proc.pid).children(recursive=True)) < 4:
        time.sleep(0.05)
    yield proc
    os.killpg(proc.pid, 9)
    proc.wait()
