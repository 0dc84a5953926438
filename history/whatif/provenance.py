"""Where each input of a projection comes from, and the ETTR band over the ones that are guesses.

Every input is ``published`` (a paper's figure), ``measured`` (this pipeline's score or history, with
its sample count), ``assumed`` (nobody published it), ``given`` (the user's flag or file) or
``derived`` (left to the model); an assumed input, and a published one given as a range, carries
``low`` / ``high``. What a fault class *is* (it stops the job, it loses work, it is planned) is
structural, not a guess with a range: reported as assumed, held fixed. ``band`` reruns the closed form with each ranged input at
each end, then with all of them at their worse and at their better ends: the ETTR a planner can
count on is the low end, not the central figure (docs/ettr.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

from faultlens.history.whatif.model import Scenario


class Kind(enum.StrEnum):
    PUBLISHED = "published"
    MEASURED = "measured"
    ASSUMED = "assumed"
    GIVEN = "given"          # set by the user (flag or TOML): theirs to vouch for
    DERIVED = "derived"      # left to the model: the optimum interval, the standby pool's P99


@dataclass(frozen=True)
class Input:
    kind: Kind
    source: str
    low: float | None = None
    high: float | None = None
    samples: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": str(self.kind), "source": self.source}
        if self.low is not None:
            out["range"] = [self.low, self.high]
        if self.samples is not None:
            out["samples"] = self.samples
        return out


def get(s: Scenario, key: str) -> Any:
    """The value at ``key``: ``gpus``, ``recovery.restart_s``, ``faults.job_hang.detect_s``."""
    parts = key.split(".")
    if parts[0] == "recovery":
        return getattr(s.recovery, parts[1])
    if parts[0] == "faults":
        return getattr({f.name: f for f in s.faults}[parts[1]], parts[2])
    return getattr(s, key)


def put(s: Scenario, key: str, value: Any) -> Scenario:
    parts = key.split(".")
    if parts[0] == "recovery":
        return replace(s, recovery=replace(s.recovery, **{parts[1]: value}))
    if parts[0] == "faults":
        return s.with_fault(parts[1], **{parts[2]: value})
    return replace(s, **{key: value})


def mark(s: Scenario, key: str, inp: Input) -> Scenario:
    return replace(s, provenance={**s.provenance, key: inp})


def inputs(s: Scenario) -> dict[str, dict[str, Any]]:
    """Every input with its value and provenance; one nobody marked is reported as assumed."""
    keys = ["gpus", "gpus_per_node", "days", "checkpoint_interval_s", "checkpoint_stall_s", "spares",
            "spare_return_days"]
    keys += [f"recovery.{k}" for k in vars(s.recovery)]
    for f in s.faults:
        keys += [f"faults.{f.name}.{k}" for k in vars(f) if k != "name"]
    derived = {"checkpoint_interval_s": "the interval that maximises the closed form's ETTR",
               "spares": "the warm standby pool's binomial P99 (remediation.pool.standby_size)"}
    out = {}
    for key in keys:
        if key in derived and get(s, key) is None:
            out[key] = {"value": None, **Input(Kind.DERIVED, derived[key]).to_dict()}
            continue
        inp = s.provenance.get(key) or Input(Kind.ASSUMED, "the model's default or a structural choice of the "
                                             "scenario (docs/ettr.md); held fixed")
        out[key] = {"value": get(s, key), **inp.to_dict()}
    return out


@dataclass(frozen=True)
class Band:
    low: float
    central: float
    high: float
    worst: dict[str, float]      # each ranged input at the end that lowers ETTR
    swing: dict[str, float]      # ETTR points each ranged input moves between its ends

    def to_dict(self) -> dict[str, Any]:
        return {"low": self.low, "central": self.central, "high": self.high, "worst": self.worst,
                "swing": dict(sorted(self.swing.items(), key=lambda kv: -kv[1]))}


def band(s: Scenario) -> Band:
    """ETTR over the ranged inputs (closed form): each alone at both ends at the central interval
    (which end is worse), then all at once at their worse and better ends, each job at its optimum
    interval unless the scenario fixes one."""
    from faultlens.history.whatif.closed_form import project

    p = project(s)
    ranged = {k: v for k, v in s.provenance.items() if v.low is not None and v.high is not None}
    worse, better, swing = {}, {}, {}
    for key, inp in ranged.items():
        try:
            lo_e = project(put(s, key, inp.low), p.checkpoint_interval_s).ettr
            hi_e = project(put(s, key, inp.high), p.checkpoint_interval_s).ettr
        except (KeyError, AttributeError):
            continue
        worse[key], better[key] = (inp.low, inp.high) if lo_e <= hi_e else (inp.high, inp.low)
        swing[key] = 100.0 * abs(hi_e - lo_e)
    lo_s, hi_s = s, s
    for key, value in worse.items():
        lo_s, hi_s = put(lo_s, key, value), put(hi_s, key, better[key])
    interval = s.checkpoint_interval_s
    return Band(project(lo_s, interval).ettr, p.ettr, project(hi_s, interval).ettr, worse, swing)
