"""The demo's real training job: the reference torch trainer under the launcher, hooks included,
with a NaN injected so that diagnosis → rollback → restart from the checkpoint happens for real."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from faultlens.demo import processes as pipeline
from faultlens.events.command_memory import STATE_DIR_ENV
from faultlens.events.signing import PUBLIC_KEY_FILE, VERIFY_KEY_ENV, SigningKey
from faultlens.streams.config import KafkaSettings

TRAINER_JOB = "demo-trainer"


def torch_missing() -> str | None:
    """Why the real trainer cannot run here, or None."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install -e '.[torch]'); running the simulated cluster alone"
    return None


class TrainerJob:
    def __init__(self, settings: KafkaSettings, signing_key: SigningKey, out_dir: Path, *, job: str = TRAINER_JOB,
                 nodes: int = 2, procs_per_node: int = 1, steps: int = 120, nan_at: int = 25):
        # ~10 s of steps after the NaN: the verdict comes while the job still runs, even on a
        # loaded machine (with 60 it once finished first, and there was nothing left to roll back).
        self.settings = settings
        self.signing_key = signing_key
        self.dir = out_dir / "trainer"
        self.job = job
        self.nodes, self.procs_per_node, self.steps, self.nan_at = nodes, procs_per_node, steps, nan_at
        self.proc: pipeline.Proc | None = None

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        verify_key = self.dir / PUBLIC_KEY_FILE
        verify_key.write_bytes(self.signing_key.public_pem())
        env = {**os.environ, "FAULTLENS_BOOTSTRAP": self.settings.address(), VERIFY_KEY_ENV: str(verify_key),
               STATE_DIR_ENV: str(self.dir / "state")}
        self.proc = pipeline.launcher(
            ["--job", self.job, "--nodes", str(self.nodes), "--procs-per-node", str(self.procs_per_node),
             "--standby", "s000,s001", "--grace", "3", "--crash-wait", "20"],
            ["--ckpt-dir", str(self.dir / "ckpt"), "--ckpt-every", "10", "--steps", str(self.steps),
             "--step-sleep", "0.1", "--nan-at", str(self.nan_at)],
            env, self.dir)

    def events(self) -> list[dict[str, Any]]:
        """The launcher's JSON lines so far (start, crash, restart, done, ...)."""
        return list(self.proc.lines) if self.proc else []

    def finished(self) -> bool:
        return self.proc is None or self.proc.popen.poll() is not None or any(
            e.get("event") in ("done", "gave_up", "stopped") for e in self.events())

    def stop(self) -> int | None:
        return self.proc.stop() if self.proc else None

    def log_tail(self) -> str:
        return self.proc.tail(2000) if self.proc else ""
