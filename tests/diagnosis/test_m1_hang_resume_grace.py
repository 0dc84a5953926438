"""The hang detector's whole-job quiet is one span (HangConfig.quiet_s): the one that tells the job
quiet (no suspicion while nothing of it arrives) is the one that tells it back (a grace for its first
beats, before its steps catch up). Before, "back" was read against liveness' 30 s whatever quiet_s
said: a job never quiet by its own config got a resume grace, and one that was got none.

A job steps to t=40 and then hangs; its agents beat every 10 s, with one gap in the stream."""

from __future__ import annotations

import pytest

from bench.testbed.stack_samples import JOB, T0, beat_event, grid, run_detector, step_event
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
from faultlens.diagnosis.hang.detector import HangConfig

TOPO = grid(16, 2, tp=2, pp=4, dp=4)


def _hung_with_a_gap(gap_from: int, gap_to: int) -> list:
    events = [step_event(2.0 * n + 0.001 * r, TOPO, r, n) for n in range(1, 21) for r in range(32)]
    beats = [*range(0, gap_from + 1, 10), *range(gap_to, 401, 10)]
    return events + [beat_event(float(t), node) for t in beats for node in TOPO.nodes]


def _suspected_at(quiet_s: float, gap: tuple[int, int]) -> float:
    book = JobBook()
    book.update(TOPO.to_event(JOB, T0))
    detector = ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig(quiet_s=quiet_s)))
    out = run_detector(detector, _hung_with_a_gap(*gap), until=400)
    assert out[0].action == "capture_stacks", out
    return round(out[0].ts - T0)


@pytest.mark.parametrize(
    "quiet_s, gap, at",
    [
        (45.0, (60, 95), 101),  # a 35 s gap, never quiet by 45 s: suspected as without a gap (was 140)
        (20.0, (60, 85), 105),  # a 25 s gap, quiet by 20 s: back at 85, 20 s of grace (was 101)
        (30.0, (60, 95), 125),  # the default: a 35 s gap, back at 95, 30 s of grace (as before)
    ],
)
def test_the_resume_grace_follows_the_quiet_that_told_the_job_quiet(quiet_s, gap, at):
    assert _suspected_at(quiet_s, gap) == at
