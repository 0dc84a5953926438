"""Safety limits on what remediation may do (docs/design.md §6): eviction caps, dedup, circuit breaker.

A diagnosis engine gone wrong (a bad rule, a flapping switch that makes every node look sick) must
not drain a cluster. Three guards, all pure over explicit times so tests rerun them exactly:

- caps: at most ``max_evictions`` nodes per ``window_s`` over all jobs, and at most
  ``max_job_share`` of one job's nodes (never less than one node, so a small job can still heal);
- dedup: one command per (job, node, fault, action) within ``dedup_s``;
- circuit breaker: when more than ``breaker_share`` of the known nodes were evicted within
  ``window_s`` it opens and refuses every eviction until a person resets it. Its state lives in a
  small JSON file so that restarting `faultlens remediate` keeps it open.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

BREAKER_FILE = "remediation-breaker.json"


@dataclass(frozen=True)
class SafetyConfig:
    window_s: float = 600.0
    max_evictions: int = 8
    max_job_share: float = 0.10
    breaker_share: float = 0.20
    dedup_s: float = 300.0

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.dedup_s < 0:
            raise ValueError("window_s must be > 0 and dedup_s >= 0")
        if self.max_evictions < 0:
            raise ValueError("max_evictions must be >= 0")
        for name in ("max_job_share", "breaker_share"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in (0, 1]")


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""


class CircuitBreaker:
    """Open/closed state with the reason it opened; persisted to ``path`` when one is given."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self.open = False
        self.reason = ""
        self.opened_at: float | None = None
        self._load()

    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            state = json.loads(self.path.read_text())
            self.open = bool(state["open"])
            self.reason = str(state.get("reason", ""))
            self.opened_at = state.get("opened_at")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # An unreadable state file must fail safe: treat the breaker as open until reset.
            self.open, self.reason = True, f"unreadable breaker state {self.path}: {exc}"
            log.error("%s; evictions stay blocked until `faultlens remediate --reset`", self.reason)

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"open": self.open, "reason": self.reason, "opened_at": self.opened_at})
        # Write-then-rename so a crash mid-write never leaves a half file (which would read as open).
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".breaker-")
        with os.fdopen(fd, "w") as f:
            f.write(body)
        os.replace(tmp, self.path)

    def trip(self, now: float, reason: str) -> None:
        self.open, self.reason, self.opened_at = True, reason, now
        self._save()
        log.error("circuit breaker OPEN: %s; all evictions stop until `faultlens remediate --reset`", reason)

    def reset(self) -> None:
        self.open, self.reason, self.opened_at = False, "", None
        self._save()


@dataclass
class Safety:
    """The guards for one `faultlens remediate` process. ``job_nodes`` is fed from topologies."""

    config: SafetyConfig = field(default_factory=SafetyConfig)
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    job_nodes: dict[str, int] = field(default_factory=dict)
    _evictions: deque = field(default_factory=deque)  # (ts, job, node)
    _last_command: dict[tuple[str, str, str, str], float] = field(default_factory=dict)

    def _prune(self, now: float) -> None:
        while self._evictions and self._evictions[0][0] < now - self.config.window_s:
            self._evictions.popleft()

    def is_duplicate(self, job: str, nodes: tuple[str, ...], fault: str, action: str, now: float,
                     window_s: float | None = None) -> bool:
        """True when every node (or the whole job, for no nodes) already got this within the window
        (``dedup_s`` unless given)."""
        window = self.config.dedup_s if window_s is None else window_s
        keys = [(job, n, fault, action) for n in (nodes or ("*",))]
        return all(now - self._last_command.get(k, -math.inf) < window for k in keys)

    def remember(self, job: str, nodes: tuple[str, ...], fault: str, action: str, now: float) -> None:
        for n in nodes or ("*",):
            self._last_command[(job, n, fault, action)] = now

    def check_eviction(self, job: str, nodes: tuple[str, ...], now: float) -> Verdict:
        if self.breaker.open:
            return Verdict(False, f"circuit breaker open ({self.breaker.reason})")
        if not nodes:
            return Verdict(False, "an eviction must name its nodes")
        self._prune(now)
        cfg = self.config
        in_window = len(self._evictions)
        if in_window + len(nodes) > cfg.max_evictions:
            return Verdict(False, f"cap: {in_window} node(s) evicted in the last {cfg.window_s:.0f}s, "
                                  f"+{len(nodes)} would exceed {cfg.max_evictions}")
        size = self.job_nodes.get(job)
        if size:
            job_cap = max(1, math.floor(cfg.max_job_share * size))
            done = sum(1 for _, j, _ in self._evictions if j == job)
            if done + len(nodes) > job_cap:
                return Verdict(False, f"cap: job {job} has {size} nodes; {done}+{len(nodes)} evicted would exceed "
                                      f"{cfg.max_job_share:.0%} ({job_cap} node(s)) per {cfg.window_s:.0f}s")
        return Verdict(True)

    def record_eviction(self, job: str, nodes: tuple[str, ...], now: float) -> None:
        """Count an eviction that was sent; opens the breaker when the window's share gets too big."""
        self._prune(now)
        for n in nodes:
            self._evictions.append((now, job, n))
        known = sum(self.job_nodes.values())
        if known and len(self._evictions) / known > self.config.breaker_share:
            self.breaker.trip(now, f"{len(self._evictions)} of {known} known nodes evicted within "
                                   f"{self.config.window_s:.0f}s (limit {self.config.breaker_share:.0%})")
