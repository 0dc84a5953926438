"""Remediation's side of a wave (docs/remediation.md, Waves): after diagnosis reports one finding
for a fault class on many machines of a job (diagnosis/waves.py: ``group`` ``wave:<cause>``), a
diagnosis of that class about one machine of that job is recorded, not acted on, until
``pause_s`` after the wave's last report: a straggler of the wave that diagnosis judged alone (it
came after the wave's window) must not spend the eviction cap on a healthy machine. Other classes
(an Xid 79, ECC) are never paused. Kept in memory: a restarted consumer pauses from the wave's next
report (re-sent with the same id while the wave grows)."""

from __future__ import annotations

from dataclasses import dataclass

from faultlens.events.diagnosis_record import Diagnosis

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

    def observe(self, d: Diagnosis) -> None:
        """Remember a wave diagnosis (any other is ignored)."""
        if not is_wave(d):
            return
        key = (d.job, str(d.fault))
        wave = self._waves.get(key)
        cause = (d.group or "wave:")[5:]
        if wave is None or d.onset > wave.last + self.pause_s:
            self._waves[key] = _Wave(d.id, cause, d.onset, max(d.ts, d.onset))
        else:
            wave.last, wave.cause = max(wave.last, d.ts), cause

    def paused(self, d: Diagnosis) -> str | None:
        """Why ``d`` is only recorded (a wave of its class in its job), or None."""
        if is_wave(d) or not d.nodes:
            return None
        wave = self._waves.get((d.job, str(d.fault)))
        if wave is None or not wave.onset - self.pause_s <= d.onset <= wave.last + self.pause_s:
            return None
        return (f"{d.fault}: a wave of {d.fault} in this job (diagnosis {wave.diagnosis_id}, cause {wave.cause}) is one "
                f"finding about what its machines share: remediation of {d.fault} paused for it; recorded only, a person looks")
