"""The remediation consumer's memory across restarts: each job's escalation ladder and standby pool,
the stop-time checks or dual-phase reproduction it waits for, and the machines it took out.

One small JSON file per remediation consumer (default ``$FAULTLENS_HOME/remediation-state.json``,
beside the breaker file). Without it a restarted `faultlens remediate` would climb every ladder
from the bottom again (a second reattempt for a crash that already had one) and hand out spares it
had already handed out.

Pure (de)serialisation here plus a thin load / save edge; the Policy decides when to save.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultlens.remediation.ladder import JobLadder
from faultlens.remediation.pool import StandbyPool
from faultlens.remediation.reproduction import PendingReproduction
from faultlens.remediation.stop_checks import PendingChecks

log = logging.getLogger(__name__)

STATE_FILE = "remediation-state.json"
STATE_ENV = "FAULTLENS_REMEDIATION_STATE"
VERSION = 1
# A job no diagnosis was decided for in a week has long left its ladder episode (an hour by
# default); its spares are also guarded by the topology (a spare the job now runs on is never
# handed out again), so forgetting it costs nothing and keeps the file small.
KEEP_S = 7 * 86400.0


class StateError(ValueError):
    """The state file (or one job's entry in it) cannot be read back."""


@dataclass
class JobState:
    """What one job leaves behind: its ladder, its pool, what it waits for, and when a decision last
    touched it. (Files written before ``checks`` / ``replay`` (the reproduction) / ``taken_out`` existed read as none.)"""

    job: str
    touched: float
    ladder: JobLadder | None = None
    pool: StandbyPool | None = None
    checks: PendingChecks | None = None
    reproduction: PendingReproduction | None = None
    taken_out: dict[str, str] = field(default_factory=dict)  # node evicted → the diagnosis id that did it

    def to_dict(self) -> dict[str, Any]:
        return {"touched": self.touched,
                "ladder": self.ladder.to_dict() if self.ladder else None,
                "pool": self.pool.to_dict() if self.pool else None,
                "checks": self.checks.to_dict() if self.checks else None,
                # the key stays "replay": state files on remediation.state were written with it
                "replay": self.reproduction.to_dict() if self.reproduction else None,
                "taken_out": dict(self.taken_out)}

    @classmethod
    def from_dict(cls, job: str, data: Any, ladder_config: dict[str, float]) -> "JobState":
        if not isinstance(data, dict):
            raise StateError(f"job {job!r}: entry is {type(data).__name__}, not an object")
        touched = data.get("touched")
        if not isinstance(touched, (int, float)) or isinstance(touched, bool):
            raise StateError(f"job {job!r}: 'touched' must be a number, got {touched!r}")
        try:
            ladder = JobLadder.from_dict(data["ladder"], **ladder_config) if data.get("ladder") else None
            pool = StandbyPool.from_dict(data["pool"]) if data.get("pool") else None
            checks = PendingChecks.from_dict(data["checks"]) if data.get("checks") else None
            reproduction = PendingReproduction.from_dict(data["replay"]) if data.get("replay") else None
            taken_out = data.get("taken_out") or {}
            if not isinstance(taken_out, dict) or not all(isinstance(v, str) for v in taken_out.values()):
                raise ValueError(f"'taken_out' must map nodes to diagnosis ids, got {taken_out!r:.80}")
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"job {job!r}: {exc}") from exc
        for part in (ladder, pool, checks, reproduction):
            if part is not None and part.job != job:
                raise StateError(f"job {job!r}: entry names job {part.job!r}")
        return cls(job, float(touched), ladder, pool, checks, reproduction, {str(k): v for k, v in taken_out.items()})


@dataclass
class StateStore:
    """Load once at start, save after every decision that changed something (write-then-rename)."""

    path: Path
    keep_s: float = KEEP_S
    errors: list[str] = field(default_factory=list)  # what load() could not read, for callers and tests

    def load(self, ladder_config: dict[str, float]) -> dict[str, JobState]:
        """The jobs in the file. A missing file is an empty state; an unreadable one too, with an ERROR.

        Starting empty is the safe side here (unlike the breaker, which fails closed): a forgotten
        ladder restarts at its least disruptive rung (reattempt / restart, never an eviction on the
        first failure), and spares are still kept off machines the job's topology runs on. Blocking
        remediation instead would leave every job to a person because of a bad file. The file is
        moved aside so the next save does not overwrite the evidence.
        """
        if not self.path.exists():
            return {}
        try:
            raw = json.loads(self.path.read_text())
            if not isinstance(raw, dict) or raw.get("version") != VERSION or not isinstance(raw.get("jobs"), dict):
                raise StateError(f"not a version-{VERSION} remediation state (keys: {sorted(raw) if isinstance(raw, dict) else type(raw).__name__})")
        except (OSError, ValueError) as exc:  # json.JSONDecodeError and StateError are ValueErrors
            self._report(f"unreadable remediation state {self.path}: {exc}; starting with no ladder or pool state")
            self._move_aside()
            return {}
        jobs: dict[str, JobState] = {}
        for job, entry in raw["jobs"].items():
            try:
                jobs[job] = JobState.from_dict(job, entry, ladder_config)
            except StateError as exc:
                self._report(f"remediation state {self.path}: {exc}; that job starts from the bottom of its ladder")
        log.info("remediation state %s: %d job(s) restored", self.path, len(jobs))
        return jobs

    def save(self, jobs: dict[str, JobState], now: float | None = None) -> None:
        """Write ``jobs`` (less those idle over ``keep_s``, which are dropped from ``jobs`` too)."""
        now = time.time() if now is None else now
        for job in [j for j, s in jobs.items() if now - s.touched > self.keep_s]:
            del jobs[job]
        body = json.dumps({"version": VERSION, "saved_at": now,
                           "jobs": {j: s.to_dict() for j, s in sorted(jobs.items())}}, indent=1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Write-then-rename with fsync: a crash mid-write leaves the old file, never a half one.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".remediation-state-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        try:  # the rename itself is durable only once the directory is synced
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            pass  # some filesystems refuse fsync on a directory; the file itself is synced

    def _report(self, message: str) -> None:
        self.errors.append(message)
        log.error("%s", message)

    def _move_aside(self) -> None:
        aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
        try:
            os.replace(self.path, aside)
            log.error("kept the unreadable remediation state as %s", aside)
        except OSError as exc:
            log.error("could not move the unreadable remediation state aside: %s", exc)
