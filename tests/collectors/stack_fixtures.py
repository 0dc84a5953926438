"""A stand-in training job for stack-capture tests: a launcher with two ranks (RANK 8 and 9),
each with a child of its own that carries the same environment (a DataLoader worker). Each lives
an hour, i.e. until the fixture kills the group: not two minutes, which a test on a loaded
machine could outlast (issue 47)."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from tests.progress import cpu_ticks, wait_until

RANK_FUNCTION = "train_step_waiting_in_allreduce"

_RANK = f"""
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
def {RANK_FUNCTION}():
    time.sleep(3600)
{RANK_FUNCTION}()
"""
_LAUNCHER = """
import os, subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", sys.argv[1]], env={**os.environ, "RANK": str(8 + r), "LOCAL_RANK": str(r)})
        for r in range(2)]
print("ready", flush=True)
time.sleep(3600)
"""


@pytest.fixture
def launcher():
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, _RANK], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    # Until both ranks have started their worker child: the tree is complete.
    # Waited for while the tree's processes compute (interpreters starting), not a fixed 20 s (issue 47).
    tree = psutil.Process(proc.pid)
    wait_until(lambda: len(tree.children(recursive=True)) >= 4,
               progress=lambda: (len(tree.children(recursive=True)),
                                 sum(cpu_ticks(p.pid) for p in tree.children(recursive=True))),
               stall_s=60, limit_s=240, what="the stand-in job's four processes", poll_s=0.05)
    yield proc
    os.killpg(proc.pid, 9)
    proc.wait()
