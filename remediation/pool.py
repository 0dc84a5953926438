"""The warm standby pool (docs/design.md §6): how many spare machines a job keeps, and handing them out.

The size is the P99 of the number of machines that fail at the same time: with ``n`` machines each
failing independently at a daily rate ``r``, the failures inside one replacement window are
Binomial(n, p) with p = 1 - (1 - r) ** window_days. ByteRobust (Table 5) keeps 4 spares for 1,024
machines, which is what this gives for r = 0.12 %/day over a one-day window.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

log = logging.getLogger(__name__)

DEFAULT_DAILY_FAILURE_RATE = 0.0012
DEFAULT_WINDOW_DAYS = 1.0
DEFAULT_QUANTILE = 0.99


def binomial_quantile(n: int, p: float, q: float) -> int:
    """The smallest k with P(X <= k) >= q for X ~ Binomial(n, p).

    Summed in log space so large n with tiny p neither underflows nor needs scipy.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must be in (0, 1), got {q}")
    if n == 0 or p == 0.0:
        return 0
    if p == 1.0:
        return n
    log_p, log_1p = math.log(p), math.log1p(-p)
    cdf = 0.0
    for k in range(n + 1):
        log_pmf = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p + (n - k) * log_1p
        cdf += math.exp(log_pmf)
        if cdf >= q - 1e-12:
            return k
    return n


def standby_size(nodes: int, daily_failure_rate: float = DEFAULT_DAILY_FAILURE_RATE,
                 window_days: float = DEFAULT_WINDOW_DAYS, quantile: float = DEFAULT_QUANTILE) -> int:
    """Spares for a job of ``nodes`` machines: the ``quantile`` of simultaneous failures."""
    if window_days <= 0:
        raise ValueError(f"window_days must be > 0, got {window_days}")
    p = 1.0 - (1.0 - daily_failure_rate) ** window_days
    return binomial_quantile(nodes, p, quantile)


@dataclass
class Allocation:
    """What an eviction got from the pool: the spares that replace it and how many are missing."""

    replacements: tuple[str, ...]
    shortfall: int

    def to_params(self) -> dict[str, object]:
        return {"replacements": list(self.replacements), "standby_shortfall": self.shortfall}


@dataclass
class StandbyPool:
    """Named spares for one job; :meth:`take` hands them out to evicted nodes."""

    job: str
    spares: list[str] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    # Diagnosis id → the spares its eviction got: a diagnosis redelivered after a restart (decided,
    # not yet committed) gets the same spares back instead of taking new ones.
    allocations: dict[str, list[str]] = field(default_factory=dict)
    # Whether the last eviction found the pool short: the operator is warned when it runs short and
    # told when it can fill an eviction again, not once per eviction of the same shortage (each
    # eviction's shortfall still goes out in its command's ``standby_shortfall``). Not kept in the
    # state file: a restarted consumer warns once more, which is news to whoever reads its log.
    short: bool = field(default=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "spares": list(self.spares), "used": list(self.used),
                "allocations": {k: list(v) for k, v in self.allocations.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StandbyPool":
        """Raises ValueError for anything that is not what :meth:`to_dict` writes."""
        if not isinstance(data, Mapping):
            raise ValueError(f"pool must be an object, got {type(data).__name__}")
        job = data.get("job")
        if not isinstance(job, str) or not job:
            raise ValueError(f"pool 'job' must be a non-empty string, got {job!r}")
        lists = {}
        for key in ("spares", "used"):
            value = data.get(key)
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                raise ValueError(f"pool {key!r} must be a list of host names, got {value!r}")
            lists[key] = list(value)
        allocations = data.get("allocations", {})
        if not isinstance(allocations, Mapping) or not all(
                isinstance(v, list) and all(isinstance(n, str) for n in v) for v in allocations.values()):
            raise ValueError(f"pool 'allocations' must map diagnosis ids to host lists, got {allocations!r}")
        return cls(job, lists["spares"], lists["used"], {str(k): list(v) for k, v in allocations.items()})

    def without(self, names: "list[str] | tuple[str, ...] | set[str]") -> "StandbyPool":
        """This pool less ``names`` among its spares: hosts handed out before a restart, or now
        running the job, are no spare."""
        gone = set(names)
        return StandbyPool(self.job, [s for s in self.spares if s not in gone], list(self.used),
                           {k: list(v) for k, v in self.allocations.items()}, self.short)

    @classmethod
    def for_job(cls, job: str, nodes: int, names: list[str] | None = None, **sizing) -> "StandbyPool":
        """A pool sized by :func:`standby_size`; ``names`` (a shared list of spare hosts) fills it first."""
        size = max(standby_size(nodes, **sizing), len(names or ()))
        spares = list(names or [])[:size] if names else []
        spares += [f"{job}-standby-{i:03d}" for i in range(len(spares), size)]
        return cls(job, spares)

    def take(self, count: int, skip: "frozenset[str] | set[str]" = frozenset()) -> Allocation:
        """The first ``count`` spares, passing over ``skip`` (lemons: remediation.fleet), which stay
        listed so that a machine a person resumes is a spare again."""
        got = self._pick(count, skip)
        self.spares = [s for s in self.spares if s not in got]
        self.used.extend(got)
        return self._noted(Allocation(tuple(got), count - len(got)))

    def preview(self, count: int, skip: "frozenset[str] | set[str]" = frozenset()) -> Allocation:
        """What :meth:`take` would hand out, handing out nothing (a dry run's eviction): it still
        warns, once, when the pool could not fill it."""
        got = self._pick(count, skip)
        return self._noted(Allocation(tuple(got), count - len(got)))

    def _pick(self, count: int, skip: "frozenset[str] | set[str]") -> list[str]:
        return [s for s in self.spares if s not in skip][:count]

    def _noted(self, allocation: Allocation) -> Allocation:
        """``allocation``, after logging a change of shortage: a warning when the pool runs short, a
        line when it fills an eviction again; each shortfall in between only at DEBUG."""
        wanted = len(allocation.replacements) + allocation.shortfall
        if allocation.shortfall and not self.short:
            log.warning("job %s: standby pool ran short: an eviction of %d node(s) got %d spare(s); later "
                        "evictions it cannot fill are logged at DEBUG until it fills one again "
                        "(each command carries its standby_shortfall)",
                        self.job, wanted, len(allocation.replacements))
        elif allocation.shortfall:
            log.debug("job %s: standby pool still short: an eviction of %d node(s) got %d spare(s)",
                      self.job, wanted, len(allocation.replacements))
        elif wanted and self.short:
            log.warning("job %s: standby pool no longer short: an eviction of %d node(s) got its spare(s)",
                        self.job, wanted)
        if wanted:
            self.short = allocation.shortfall > 0
        return allocation

    def take_for(self, key: str, count: int, skip: "frozenset[str] | set[str]" = frozenset()) -> Allocation:
        """:meth:`take`, once per ``key`` (a diagnosis id): the same key again gets what it got."""
        if key in self.allocations:
            got = tuple(self.allocations[key])
            return Allocation(got, max(0, count - len(got)))
        allocation = self.take(count, skip)
        if allocation.replacements:
            self.allocations[key] = list(allocation.replacements)
        return allocation
