"""Any other scheduler: run the operator's command with the request as JSON on stdin.

The command (``--actuator-command``, split like a shell would but run without one) gets one JSON
object: ``{"op": "take_out"|"requeue"|"bring_back", "job", "nodes", "diagnosis_id", "fault",
"reason", "command", "scheduler_reason"}``. Exit 0 is success (its last stdout line is kept as
the detail); any other exit, or running past the timeout, is an error with its last stderr line.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from typing import Mapping

from faultlens.remediation.actuators.base import ActionRequest, Actuator, ActuatorError

MAX_DETAIL = 500


@dataclass(frozen=True)
class ScriptConfig:
    command: str
    timeout_s: float = 30.0
    env: Mapping[str, str] | None = None

    def argv(self) -> list[str]:
        try:
            argv = shlex.split(self.command)
        except ValueError as exc:
            raise ValueError(f"--actuator-command {self.command!r}: {exc}") from None
        if not argv:
            raise ValueError("--actuator script needs --actuator-command CMD (or FAULTLENS_ACTUATOR_COMMAND)")
        return argv


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:MAX_DETAIL] if lines else ""


class ScriptActuator(Actuator):
    name = "script"

    def __init__(self, config: ScriptConfig):
        self.config = config
        self.argv = config.argv()  # fail at start, not at the first eviction

    def _call(self, request: ActionRequest) -> str:
        payload = json.dumps({**request.to_dict(), "scheduler_reason": request.scheduler_reason()})
        env = {**os.environ, **(self.config.env or {}), "FAULTLENS_ACTION": request.op}
        try:
            r = subprocess.run(self.argv, input=payload, capture_output=True, text=True,
                               timeout=self.config.timeout_s, env=env)
        except subprocess.TimeoutExpired:
            raise ActuatorError(f"{self.argv[0]} ran past {self.config.timeout_s:g}s and was killed") from None
        except OSError as exc:
            raise ActuatorError(f"cannot run {self.argv[0]}: {exc}") from None
        if r.returncode != 0:
            why = _last_line(r.stderr) or _last_line(r.stdout) or "no output"
            raise ActuatorError(f"{self.argv[0]} exited {r.returncode}: {why}")
        return _last_line(r.stdout) or f"{self.argv[0]} exited 0"

    take_out = requeue = bring_back = _call
