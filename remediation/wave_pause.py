"""Remediation's side of a wave (docs/remediation.md, Waves): after diagnosis reports one finding
for a fault class on many machines of a job (diagnosis/engine/waves.py: ``group`` ``wave:<cause>``), a
diagnosis of that class about one machine of that job is recorded, not acted on, until
``pause_s`` after the wave's last report: a straggler of the wave that diagnosis judged alone (it
came after the wave's window) must not spend the eviction cap on a healthy machine. Other classes
(an Xid 79, ECC) are never paused. Kept in memory: a restarted consumer pauses from the wave's next
report (re-sent with the same id while the wave grows).

A wave that names a part of the fleet (``wave:ib_switch=<guid>``, ``wave:rack=r07``) also pauses its
class for a machine of any job that sits in that part by its job's topology (``machines``): the
switch's other jobs' stragglers are the same event. A fleet wave across jobs is one finding under
its first machine's job, delivered under every job of its part (diagnosis/engine/fleet_waves.py), so
the remediation member of each of them observes it (Policy.hear_wave when it came under another
job's key)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from faultlens.diagnosis.engine.fleet_waves import values_of
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.topology import Topology

WAVE_PAUSE_S = 600.0


def is_wave(d: Diagnosis) -> bool:
    return (d.group or "").startswith("wave:") and not d.nodes


@dataclass
class _Wave:
    diagnosis_id: str
    cause: str
    onset: float
    last: float


class WavePause:
    def __init__(self, pause_s: float = WAVE_PAUSE_S) -> None:
        self.pause_s = pause_s
        self._waves: dict[tuple[str, str], _Wave] = {}
        # (class, "key=value") → the latest wave naming that part of the fleet
        self._parts: dict[tuple[str, str], _Wave] = {}

    def observe(self, d: Diagnosis) -> None:
        """Remember a wave diagnosis (any other is ignored)."""
        if not is_wave(d):
            return
        key = (d.job, str(d.fault))
        wave = self._waves.get(key)
        cause = (d.group or "wave:")[5:]
        if wave is None or d.onset > wave.last + self.pause_s:
            wave = self._waves[key] = _Wave(d.id, cause, d.onset, max(d.ts, d.onset))
        else:
            wave.last, wave.cause = max(wave.last, d.ts), cause
        if "=" in cause:
            self._parts[(str(d.fault), cause)] = wave

    def paused(self, d: Diagnosis, topologies: Mapping[str, Topology] | None = None) -> str | None:
        """Why ``d`` is only recorded (a wave of its class in its job, or in the part of the fleet
        its machines sit in by ``topologies``), or None."""
        if is_wave(d) or not d.nodes:
            return None
        wave = self._waves.get((d.job, str(d.fault)))
        if wave is not None and self._within(wave, d):
            return (f"{d.fault}: a wave of {d.fault} in this job (diagnosis {wave.diagnosis_id}, cause {wave.cause}) is "
                    f"one finding about what its machines share: remediation of {d.fault} paused for it; recorded "
                    f"only, a person looks")
        topology = (topologies or {}).get(d.job)
        machines: Any = (topology.extra or {}).get("machines") if topology is not None else None
        if not self._parts or not isinstance(machines, Mapping):
            return None
        for (fault, cause), wave in self._parts.items():
            key, _, value = cause.partition("=")
            if (fault == str(d.fault) and self._within(wave, d)
                    and all(value in values_of(machines.get(n), key) for n in d.nodes)):
                return (f"{d.fault}: a wave of {d.fault} under {cause} (diagnosis {wave.diagnosis_id}), where these "
                        f"machines sit, is one finding about that part: remediation of {d.fault} paused for it; "
                        f"recorded only, a person looks")
        return None

    def _within(self, wave: _Wave, d: Diagnosis) -> bool:
        return wave.onset - self.pause_s <= d.onset <= wave.last + self.pause_s
