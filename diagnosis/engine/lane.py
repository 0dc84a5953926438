"""One job's lane in the engine: its job stage, its clock, and the way from what its detectors
report to diagnoses (waves, debounce, dedup, and the job stage's reactions to what came out).

Jobs never share time, so a replayed old trace beside live jobs, or a simulated cluster at 20x
beside a real trainer, each run on their own events (diagnosis/engine/core.py routes them here).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from faultlens.diagnosis.engine.debounce import Debounce
from faultlens.diagnosis.engine.dedup import Dedup
from faultlens.diagnosis.engine.stages import JobStage, skew_detail
from faultlens.diagnosis.engine.waves import Waves
from faultlens.diagnosis.rules.base import Finding
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.envelope import Envelope


@dataclass
class Lane:
    """One job's detectors and clock; ``stats`` is the engine's, shared by every lane."""

    stage: JobStage
    dedup: Dedup
    waves: Waves
    debounce: Debounce
    stats: Counter
    now: float | None = None
    last_tick: float = float("-inf")
    arrival_wall: float = 0.0  # wall time of its latest event
    arrival_now: float | None = None  # its event time then
    # The latest event time it delivered itself (``now`` may be moved past it: a quiet job), and
    # that time at its latest check of which jobs share its clock (diagnosis/engine/time_base.py).
    delivered: float = float("-inf")
    clock_checked: float = float("-inf")
    skew_alerted: dict[str, float] = field(default_factory=dict)
    # Restarts stamped ahead of the job's time, applied when its time gets there: a consumer that
    # reads `jobs` in full may see a restart before the telemetry that came before it.
    pending: list[Envelope] = field(default_factory=list)

    def settle(self, findings: list[Finding], diags: list[Diagnosis]) -> list[Diagnosis]:
        """Dedup everything, then let the job stage react to what came out (a fail-slow suspicion
        starts stack rounds), until nothing new appears."""
        if not findings and not diags:
            return []
        out: list[Diagnosis] = []
        for f in findings:
            now = self.waves.admit(f)
            if not now:
                self.dedup.note_held(f)
            out.extend(self.judge(now))
        for d in diags:
            out.extend(self.dedup.admit_diagnosis(d))
        queue = list(out)
        for _ in range(4):  # reactions of reactions are rare; bounded so a loop cannot spin
            follow: list[Diagnosis] = []
            for d in queue:
                for r in self.stage.observe_diagnosis(d):
                    follow.extend(self.dedup.admit_diagnosis(r))
            if not follow:
                break
            out.extend(follow)
            queue = follow
        self.stats["diagnoses"] += len(out)
        return out

    def judge(self, findings: list[Finding]) -> list[Diagnosis]:
        """Findings no wave holds: debounced (grey evidence), then folded and escalated."""
        return [d for f in findings for g in self.debounce.admit(f) for d in self.dedup.admit(g)]

    def release_waves(self, now: float | None, keep_lone: bool = False) -> list[Diagnosis]:
        """Waves that closed by ``now`` (None: at the end of input, all of them), and the findings
        they held that made no wave (``keep_lone``: those stay held)."""
        released, waves = self.waves.tick(now, keep_lone) if now is not None else self.waves.flush()
        self.stats["diagnoses"] += len(waves)
        return waves + self.judge(released)

    def tick(self, now: float, stream_stopped: bool = False) -> list[Diagnosis]:
        """The absence detectors, waves and dedup at event time ``now`` (``stream_stopped``: the wall
        clock moved it, nothing on the job's clock having arrived: diagnosis/rules/liveness.py).

        Wall time only says the stream stopped: a consumer starved of CPU behind its input cannot
        tell that from a stop, and what it has not read yet may be the rest of a wave. So a
        candidate of no wave is not released on it to be judged alone (the first machine of a wave
        not read yet was evicted: tests/diagnosis/test_backlog_wall_time.py); the job's own events
        release it, or the end of a trace. Waves still form and end on it (nobody is evicted)."""
        self.last_tick = now
        findings, diags = self.stage.tick(now, stream_stopped)
        out = self.settle(findings, diags)
        out.extend(self.release_waves(now, keep_lone=stream_stopped))
        out.extend(self.dedup.tick(now))
        return out

    def flush(self) -> list[Diagnosis]:
        """End of input: what is pending, decided."""
        out = self.settle(self.stage.flush(), [])
        out.extend(self.release_waves(None))
        out.extend(self.dedup.flush())
        return out

    def skew_alert(self, event: Envelope, skew_s: float, clamped: str | None, at: float | None,
                   every_s: float) -> list[Diagnosis]:
        """A node's clock is off: its events still count (placed by the consumer), and it is named
        in a record-only alert once per ``every_s`` of event time."""
        self.stats["clock_skew"] += 1
        when = at if at is not None else event.ts
        last = self.skew_alerted.get(event.node)
        if last is not None and abs(when - last) < every_s:
            return []
        self.skew_alerted[event.node] = when
        return [Diagnosis(job=event.job, ts=when, onset=when, fault=FaultClass.CLOCK_SKEW, action=Action.NONE,
                          nodes=(event.node,), confidence=1.0, evidence=(event.id,),
                          detail=skew_detail(event, skew_s, clamped))]
