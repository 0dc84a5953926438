"""The operator side a single-machine `faultlens run` starts for itself when it has none: `faultlens
up` (the embedded broker, diagnosis, remediation acting on this job, the history) in a process of
its own, as `faultlens demo` runs the pipeline beside its trainer. The job then needs no operator
setup: its crash is diagnosed and answered, and when it ends the history is there to report on.

Only for a job of one machine: the agents of other machines could not find a broker that lives
here. `up` signs its commands with an ephemeral key and writes the public half to
$FAULTLENS_HOME (its ready line says where); the job verifies with it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

READY_WAIT_S = 180.0  # a bound on `up` never saying ready (its broker, topics, three groups), not a speed


def single_machine(nnodes: str | None, standalone: bool) -> bool:
    """Whether torchrun's --nnodes (N or MIN:MAX) allows only this machine."""
    if standalone or not nnodes:
        return True
    try:
        return int(str(nnodes).split(":")[-1]) == 1
    except ValueError:
        return False


class LocalOperator:
    """`faultlens up --act-on JOB` (and ``engine_flags``, the diagnosis engine's flags `faultlens run`
    passes on, such as --hang-floor) as a child process: ``start`` waits for its ready line,
    ``stop`` ends it (it commits, writes the history and stops its broker) and says where the
    history is."""

    def __init__(self, job: str, log_path: Path, engine_flags: list[str] | None = None):
        self.job, self.log_path = job, log_path
        self.argv = [sys.executable, "-m", "faultlens", "up", "--act-on", job, *(engine_flags or ())]
        self.proc: subprocess.Popen | None = None
        self.ready: dict[str, Any] | None = None
        self._ready = threading.Event()

    def start(self) -> dict[str, Any] | None:
        """The ready line (bootstrap, db, the signing key's public half), or None when `up` ended or
        never said ready (a missing extra, say: its log has why)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.log_path.open("ab"), stdin=subprocess.DEVNULL,
                                     text=True, start_new_session=True)  # a Ctrl-C of the job is not up's
        threading.Thread(target=self._read, name="faultlens-up-lines", daemon=True).start()
        self._ready.wait(READY_WAIT_S)
        if self.ready is None:
            self.stop()
        return self.ready

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and line.get("event") == "ready":
                self.ready = line
                self._ready.set()
        self._ready.set()  # it ended: nobody waits any longer

    @property
    def verify_key(self) -> str | None:
        """The public key `up` signs with, when it made an ephemeral pair."""
        from faultlens.events.home import EPHEMERAL_VERIFY_KEY, faultlens_home

        path = faultlens_home() / EPHEMERAL_VERIFY_KEY
        return str(path) if path.exists() else None

    def stop(self, timeout: float = 120.0) -> str | None:
        """End `up` (SIGTERM: each consumer commits, the history is written, the broker stops last);
        the history's path."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("faultlens up did not stop within %.0f s; killed (its log: %s)", timeout, self.log_path)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return (self.ready or {}).get("db")
