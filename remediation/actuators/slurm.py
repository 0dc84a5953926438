"""Slurm: drain / resume machines with `scontrol`, requeue or signal the job.

Every call is an argument list (no shell: a node name or reason never becomes shell syntax)
with a timeout; after a change of a node's state the node is read back with
``scontrol show node -o`` and the change is checked, since scontrol answers 0 to some updates it
did not apply. The faultlens job is the Slurm job id when it looks like one (``1234``,
``1234_5``), otherwise the job name, resolved with ``squeue``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping

from faultlens.remediation.actuators.base import ActionRequest, Actuator, ActuatorError

JOB_ID = re.compile(r"^\d+(_\d+)?$")
# scontrol reads a Reason up to the end of its argument; keep it one line and bounded.
MAX_REASON = 200


@dataclass(frozen=True)
class SlurmConfig:
    timeout_s: float = 10.0
    # "requeue": `scontrol requeue` (batch jobs; Slurm restarts them, drained nodes excluded);
    # "signal": `scancel --signal=SIGNAL` (the job's own handler decides: checkpoint and exit).
    requeue: str = "requeue"
    signal: str = "USR1"
    env: Mapping[str, str] | None = None  # None: this process's environment (SLURM_CONF etc.)

    def __post_init__(self) -> None:
        if self.requeue not in ("requeue", "signal"):
            raise ValueError(f"slurm requeue mode must be 'requeue' or 'signal', got {self.requeue!r}")
        if not re.fullmatch(r"[A-Z0-9]+", self.signal):
            raise ValueError(f"slurm signal must be a signal name or number like USR1, got {self.signal!r}")


def _id_order(job_id: str) -> tuple[int, ...]:
    return tuple(int(p) for p in job_id.split("_"))


def parse_show_node(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show node -o` output → {NodeName: {field: value}}. One line per node; fields are
    ``Key=Value`` separated by spaces, except that ``OS`` may hold spaces (a token without ``=``
    continues the previous value) and ``Reason``, last on the line, holds the rest of it."""
    nodes: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("NodeName="):
            continue
        fields: dict[str, str] = {}
        # Reason is free text and comes last (it may itself hold "key=value" words, ours do).
        line, has_reason, reason = line.partition(" Reason=")
        if has_reason:
            fields["Reason"] = reason.strip()
        last = None
        for tok in line.split(" "):
            if not tok:
                continue
            key, eq, value = tok.partition("=")
            if eq and re.fullmatch(r"[A-Za-z][A-Za-z0-9_/:]*", key):
                fields[key] = value
                last = key
            elif last is not None:
                fields[last] += " " + tok
        nodes[fields["NodeName"]] = fields
    return nodes


def state_flags(state: str) -> set[str]:
    """``IDLE+DRAIN`` → {"IDLE", "DRAIN"}; a trailing ``*`` (not responding) is its own flag."""
    flags = set()
    for part in state.split("+"):
        if part.endswith("*"):
            flags.add("NOT_RESPONDING")
            part = part[:-1]
        if part:
            flags.add(part.upper())
    return flags


class SlurmActuator(Actuator):
    name = "slurm"

    def __init__(self, config: SlurmConfig = SlurmConfig()):
        self.config = config

    # --- plumbing -------------------------------------------------------------------------------
    def _run(self, argv: list[str]) -> str:
        exe = shutil.which(argv[0], path=(self.config.env or {}).get("PATH")) or shutil.which(argv[0])
        if exe is None:
            raise ActuatorError(f"{argv[0]} not found on PATH (is slurm-client installed on the remediation host?)")
        try:
            r = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=self.config.timeout_s,
                               env=dict(self.config.env) if self.config.env is not None else None,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ActuatorError(f"`{' '.join(argv[:3])}` timed out after {self.config.timeout_s:.0f}s "
                                "(slurmctld unreachable?)") from None
        except OSError as exc:
            raise ActuatorError(f"cannot run {argv[0]}: {exc}") from None
        if r.returncode != 0:
            err = (r.stderr or r.stdout).strip().splitlines()
            raise ActuatorError(f"`{' '.join(argv[:3])}` exited {r.returncode}: {err[-1] if err else 'no output'}")
        return r.stdout

    def show_nodes(self, nodes: tuple[str, ...]) -> dict[str, dict[str, str]]:
        return parse_show_node(self._run(["scontrol", "show", "node", "-o", ",".join(nodes)]))

    def _update_nodes(self, nodes: tuple[str, ...], *settings: str) -> None:
        if not nodes:
            raise ActuatorError("no node named")
        self._run(["scontrol", "update", f"NodeName={','.join(nodes)}", *settings])

    def job_ids(self, job: str) -> list[str]:
        if JOB_ID.match(job):
            return [job]
        out = self._run(["squeue", "--noheader", f"--name={job}", "--format=%i"])
        ids = list(dict.fromkeys(line.strip() for line in out.splitlines() if line.strip()))
        if not ids:
            raise ActuatorError(f"no Slurm job named {job!r} in the queue")
        if len(ids) > 1:
            # Names are not unique (another user's job, an old run): acting on all would disturb
            # jobs that have nothing to do with this diagnosis.
            listed = ",".join(sorted(ids, key=_id_order))
            raise ActuatorError(f"{len(ids)} Slurm jobs are named {job!r} ({listed}); "
                                "run the job under its Slurm id as the faultlens job to act on it")
        return ids

    # --- operations -----------------------------------------------------------------------------
    def take_out(self, request: ActionRequest) -> str:
        reason = " ".join(request.scheduler_reason().split())[:MAX_REASON]
        self._update_nodes(request.nodes, "State=DRAIN", f"Reason={reason}")
        shown = self.show_nodes(request.nodes)
        bad = [n for n in request.nodes if "DRAIN" not in state_flags(shown.get(n, {}).get("State", ""))]
        if bad:
            raise ActuatorError(f"scontrol accepted the drain but {','.join(bad)} is not draining "
                                f"(state {', '.join(shown.get(n, {}).get('State', '?') for n in bad)})")
        return "drained " + ", ".join(f"{n} ({shown[n]['State']})" for n in request.nodes)

    def requeue(self, request: ActionRequest) -> str:
        ids = self.job_ids(request.job)
        if self.config.requeue == "signal":
            for job_id in ids:
                self._run(["scancel", f"--signal={self.config.signal}", job_id])
            return f"sent SIG{self.config.signal} to job {','.join(ids)}"
        self._run(["scontrol", "requeue", ",".join(ids)])
        return f"requeued job {','.join(ids)}"

    def bring_back(self, request: ActionRequest) -> str:
        if not request.nodes:
            raise ActuatorError("no node named")
        # One node at a time, and judged by the state read back, not by scontrol's exit code:
        # for a node whose base state is UNKNOWN (not registered since slurmctld started) Slurm
        # 22.05 lifts the drain yet answers "Invalid node state specified".
        said: dict[str, str] = {}
        for node in request.nodes:
            try:
                self._update_nodes((node,), "State=RESUME")
            except ActuatorError as exc:
                said[node] = str(exc)
        shown = self.show_nodes(request.nodes)
        still = [n for n in request.nodes if "DRAIN" in state_flags(shown.get(n, {}).get("State", ""))]
        if still:
            raise ActuatorError("; ".join(f"{n} still {shown.get(n, {}).get('State', 'unknown to Slurm')}"
                                          + (f" ({said[n]})" if n in said else "") for n in still))
        notes = "".join(f" [{n}: drain lifted although {said[n]}]" for n in said)
        return "resumed " + ", ".join(f"{n} ({shown[n]['State']})" for n in request.nodes) + notes
