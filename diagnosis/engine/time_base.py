"""Which jobs share a clock: the only jobs whose event time may stand in for a quiet job's.

Each job has its own event time (diagnosis/engine/core.py). A job that stops delivering has no
events left to move its time, so its silence shows only against time that goes on elsewhere:
live the wall clock, offline nothing but the other jobs of the stream. Those say something of it
only when they run on the same clock. A simulated cluster at 20x beside a real trainer (`faultlens
demo`: 1,615 s behind the wall clock at first, level at the end), an old trace replayed beside
live jobs, a job whose every node's clock is an hour off: moving one such job's time by another's
blamed a healthy machine in the demo (recall 1.00 -> 0.71, the change reverted in 9d8fbd8).

Two jobs are mates (share a time base) once, while both delivered, their latest event times agreed
within ``tolerance_s`` at every check until each had advanced ``grace_s``: a stream read in event
time order, live, as a backlog or from a trace, interleaves two jobs on one clock; two clocks that
differ, or run at different paces (over 2x), never agree that long. A job that, still delivering,
is more than ``tolerance_s`` behind a mate is on another clock after all: they part. A mate more than
``grace_s`` behind a job has gone quiet, and its time moves to the job's less the grace (the time
elapsed past the grace, as the wall clock moves a quiet job live). Where the job's own time leapt by
more than a grace since its previous check (its clock jumped, or the whole stream paused and it came
back first), a mate is judged quiet only once the job has gone on for a grace past the leap and the
mate said nothing meanwhile: a mate still delivering on the old clock parts at its next check. A job
is never moved while it delivers: a mate that delivers is within the tolerance, and one that drifts
parts at its own next check, long before the gap is a grace.

Checks come once per ``every_s`` of a job's own delivered event time and read arrival order alone
(no wall clock), so live, as a backlog and offline they judge alike (tests/diagnosis/test_silence_clocks.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TimeBases:
    grace_s: float = 30.0
    tolerance_s: float = 15.0
    _at: dict[str, float] = field(default_factory=dict)  # job → its delivered event time at its latest check
    _mates: dict[str, set[str]] = field(default_factory=dict)
    # Two jobs not yet mates whose times agree: (a, b) with a < b → (a's time, b's time) when they began to
    _runs: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    _leapt: dict[str, float] = field(default_factory=dict)  # job → its time just after its latest leap

    def mates(self, job: str) -> frozenset[str]:
        return frozenset(self._mates.get(job, ()))

    def check(self, job: str, delivered: float) -> list[tuple[str, float]]:
        """``job`` delivered events up to ``delivered``: which jobs share its clock now, and its mates
        quiet past the grace, each with the time to move it to."""
        previous = self._at.get(job)
        self._at[job] = delivered
        if previous is not None and delivered - previous > self.grace_s:
            self._leapt[job] = delivered
        settled = delivered - self._leapt.get(job, float("-inf")) >= self.grace_s
        mates = self._mates.get(job, ())
        quiet: list[tuple[str, float]] = []
        for other, at in self._at.items():
            if other == job:
                continue
            gap = delivered - at
            if other in mates:
                if gap < -self.tolerance_s:
                    self._part(job, other)
                elif gap > self.grace_s and settled:
                    quiet.append((other, delivered - self.grace_s))
            else:
                self._agree(job, other, delivered, at, abs(gap) <= self.tolerance_s)
        return quiet

    def _agree(self, job: str, other: str, delivered: float, at: float, agree: bool) -> None:
        key, times = ((job, other), (delivered, at)) if job < other else ((other, job), (at, delivered))
        if not agree:
            self._runs.pop(key, None)
            return
        began = self._runs.get(key)
        if began is None:
            self._runs[key] = times
        elif times[0] - began[0] >= self.grace_s and times[1] - began[1] >= self.grace_s:
            del self._runs[key]
            self._mates.setdefault(job, set()).add(other)
            self._mates.setdefault(other, set()).add(job)

    def _part(self, job: str, other: str) -> None:
        self._mates[job].discard(other)
        self._mates[other].discard(job)

    def forget(self, job: str) -> None:
        """The job's state went (its input moved to another consumer): so does its place here."""
        self._at.pop(job, None)
        self._leapt.pop(job, None)
        for other in self._mates.pop(job, ()):
            self._mates[other].discard(job)
        for key in [k for k in self._runs if job in k]:
            del self._runs[key]
