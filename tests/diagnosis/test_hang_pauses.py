"""A job's periodic pauses (checkpoint saves, evaluation passes: every rank together) are learnt once,
at any job size (diagnosis.hang.detector, HangConfig.gap_margin).

Found: every rank's arrival of a step was recorded as a gap between progress, so in a job of more
than 64 ranks the one long gap (the pause) was pushed out of the 64 kept by the ranks' own arrivals
of the very next step, and each recurrence of the pause read as a hang.
"""

from __future__ import annotations

import pytest

from bench.testbed.stack_samples import JOB, T0, beat_event, grid, run_detector, step_event
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
from faultlens.diagnosis.hang.detector import HangConfig

STEP_S = 2.0
PAUSE_S = 180.0  # an evaluation pass: past the 60 s floor and 5 median step times
EVERY = 20  # steps between two pauses
SPREAD_S = 0.001  # rank r reports each step r ms after rank 0
# nodes, GPUs per node, tp, pp, dp: 8 ranks (today's test scale), 128, 512
SHAPES = {8: (1, 8, 8, 1, 1), 128: (16, 8, 8, 4, 4), 512: (64, 8, 8, 4, 16)}


def _detector(ranks: int):
    topology = grid(*SHAPES[ranks])
    book = JobBook()
    book.update(topology.to_event(JOB, T0))
    return topology, ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig()))


def _paused_job(topology, cycles: int, beats_until: float):
    """``cycles`` runs of ``EVERY`` steps, ``PAUSE_S`` between runs; then no rank steps again (the
    last rank misses the last step). Heartbeats list live trainers every 10 s until ``beats_until``.
    Returns the events and the event time of each run's last step (rank 0)."""
    ranks = len(topology.by_rank)
    events, ends, t, n = [], [], 0.0, 0
    for cycle in range(cycles):
        t += PAUSE_S if cycle else STEP_S
        for i in range(EVERY):
            n += 1
            last = cycle == cycles - 1 and i == EVERY - 1
            events += [step_event(t + SPREAD_S * r, topology, r, n) for r in range(ranks - last)]
            t += STEP_S if i < EVERY - 1 else 0.0
        ends.append(T0 + t)
    events += [beat_event(b, node) for b in range(0, int(beats_until), 10) for node in topology.nodes]
    return events, ends


@pytest.mark.parametrize("ranks", sorted(SHAPES))
def test_a_pause_seen_once_is_no_hang_when_it_recurs_and_a_real_hang_is_still_found(ranks):
    topology, det = _detector(ranks)
    events, (first, second, last) = _paused_job(topology, cycles=3, beats_until=1000)
    out = run_detector(det, events, until=1000)
    suspicions = [d for d in out if d.action == "capture_stacks"]
    # The first pause is suspected (nothing of the job's pace says it pauses yet); the second,
    # as long, is not; the stop after the third run is, once it outlasts twice the pause.
    spread = SPREAD_S * (ranks - 1)
    assert [s.onset for s in suspicions] == pytest.approx([first + spread, last + spread - SPREAD_S], abs=1e-6)
    assert not [d for d in out if second < d.ts < second + PAUSE_S + 1]
    assert det.hang.threshold(JOB) == pytest.approx(2 * (PAUSE_S - spread), abs=1e-6)
    hang = suspicions[-1]
    assert hang.ranks == (ranks - 1,)
    assert 0 <= hang.ts - hang.onset - det.hang.threshold(JOB) < 1.0


@pytest.mark.parametrize("ranks", [8, 512])
def test_a_pause_then_a_restart_from_a_lower_step_is_one_gap_not_one_per_rank(ranks):
    """Ranks going back to a checkpoint's step after a long pause: the job's progress once, its gap
    learnt; the other ranks' arrivals of that step are no gaps of the job."""
    topology, det = _detector(ranks)
    events = [step_event(STEP_S * n + SPREAD_S * r, topology, r, n) for n in range(1, 21) for r in range(ranks)]
    back = STEP_S * 20 + 300.0  # back at step 11 after 300 s, then steps every 2 s
    events += [step_event(back + STEP_S * i + SPREAD_S * r, topology, r, 11 + i) for i in range(10) for r in range(ranks)]
    events += [beat_event(b, node) for b in range(0, 400, 10) for node in topology.nodes]
    out = run_detector(det, events, until=back + 30)
    spread = SPREAD_S * (ranks - 1)
    # The 300 s pause before the restart was suspected; the job stepping again cleared it.
    assert [d.onset for d in out if d.action == "capture_stacks"] == pytest.approx([T0 + STEP_S * 20 + spread], abs=1e-6)
    assert det.hang.threshold(JOB) == pytest.approx(2 * (300.0 - spread), abs=1e-6)


def _pause_every(topology, runs: tuple[int, ...]):
    """Runs of steps (``runs``: how many each), a ``PAUSE_S`` pause of every rank together between
    two, beats every 10 s; after the last run no rank steps again (the last rank misses its last
    step). Returns the events, each pause's start and the stop's (rank 0)."""
    ranks = len(topology.by_rank)
    steps, pauses, t, n = [], [], STEP_S, 0
    for run, count in enumerate(runs):
        if run:
            pauses.append(T0 + t - STEP_S)
            t += PAUSE_S - STEP_S
        for i in range(count):
            n += 1
            last = run == len(runs) - 1 and i == count - 1
            steps += [step_event(t + SPREAD_S * r, topology, r, n) for r in range(ranks - last)]
            t += STEP_S
    stop = T0 + t - STEP_S
    until = t + 3 * PAUSE_S
    beats = [beat_event(b, node) for b in range(0, int(until), 10) for node in topology.nodes]
    return steps + beats, pauses, stop, until


@pytest.mark.parametrize("ranks, every", [(8, 100), (512, 100), (8, 1000), (512, 1000)])
def test_a_pause_every_hundreds_of_steps_is_remembered_between_its_recurrences(ranks, every):
    """Found: the gap margin took only the job's last 64 gaps, so a pause every 100+ steps (real
    checkpoint and evaluation intervals are hundreds to thousands of steps) had left them before it
    recurred, and every recurrence was suspected as a hang (HangConfig.pause_window_s)."""
    topology, det = _detector(ranks)
    # A first pause 3 steps in, then pauses every ``every`` steps (three at 100, two at 1,000: the
    # thousand steps of 512 ranks are half a million events already), then a real stop 3 steps on.
    runs = (3, every, every, 3) if every == 100 else (3, every, 3)
    events, pauses, stop, until = _pause_every(topology, runs)
    out = run_detector(det, events, until=until)
    spread = SPREAD_S * (ranks - 1)
    suspicions = [d for d in out if d.action == "capture_stacks"]
    # Only the first pause (nothing of the job's pace says it pauses yet) and the real stop.
    assert [s.onset for s in suspicions] == pytest.approx([pauses[0] + spread, stop + spread - SPREAD_S], abs=1e-6)
    assert det.hang.threshold(JOB) == pytest.approx(2 * (PAUSE_S - spread), abs=1e-6)
    hang = suspicions[-1]
    assert hang.ranks == (ranks - 1,)
    assert 0 <= hang.ts - hang.onset - det.hang.threshold(JOB) < 1.0


def test_a_long_pause_once_hours_ago_is_forgotten():
    """A job's one long pause (a compile of a new shape, a first evaluation) widens its margin for a
    window of event time, not for ever: hours of steady steps later a stop is suspected at the
    floor again, not at twice that pause."""
    topology, det = _detector(8)
    once = 1500.0
    window = det.hang.config.pause_window_s
    step_s = 10.0  # 5 median step times: 50 s, under the 60 s floor
    times = [step_s, step_s + once]  # steps 1 and 2, the long pause between
    while times[-1] < step_s + once + window + 600:
        times.append(times[-1] + step_s)
    events = [
        step_event(ts + SPREAD_S * r, topology, r, n + 1, step_time_s=step_s)
        for n, ts in enumerate(times)
        for r in range(8 - (n == len(times) - 1))
    ]
    until = times[-1] + 300
    events += [beat_event(b, node) for b in range(0, int(until), 10) for node in topology.nodes]
    # Within the window the pause is remembered (twice it, less the ranks' spread)...
    half = step_s + once + window / 2
    out = run_detector(det, [e for e in events if e.ts <= T0 + half], until=half)
    assert det.hang.threshold(JOB) == pytest.approx(2 * (once - SPREAD_S * 7), abs=1e-6)
    # ...and past it forgotten.
    out += run_detector(det, [e for e in events if e.ts > T0 + half], start=half + 1, until=until)
    onsets = [d.onset for d in out if d.action == "capture_stacks"]
    # The pause itself was suspected; the stop hours later is, once it outlasts the 60 s floor.
    stop = T0 + times[-1] + SPREAD_S * 6
    assert onsets == pytest.approx([T0 + step_s + SPREAD_S * 7, stop], abs=1e-6)
    assert det.hang.threshold(JOB) == det.hang.config.floor_s
    hang = [d for d in out if d.action == "capture_stacks"][-1]
    assert 0 <= hang.ts - stop - det.hang.config.floor_s < 1.0
