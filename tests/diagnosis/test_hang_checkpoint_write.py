"""A checkpoint save stalls every rank for minutes: a save under way, never a reattempt nor an eviction.

Found by the outside check's round 3 (tests/outside/sre_shapes.py): 64 ranks in
torch.distributed.checkpoint's write for 4 minutes (checkpoint_stall) was a reattempt in place, which
would have thrown the save away; rank 0 writing a full state dict while 63 wait in the barrier
(checkpoint_one_writer) evicted rank 0's healthy machine 79 s into a 4-minute save.
"""

from __future__ import annotations

from bench.testbed.stack_samples import (
    BASE,
    JOB,
    SLOW_COMPUTE,
    T0,
    beat_event,
    grid,
    pyspy_dump,
    run_detector,
    stack_event,
    step_event,
)
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
from faultlens.diagnosis.hang.state import HangConfig
from faultlens.events.diagnosis_record import Action

DCP = "torch/distributed/checkpoint/filesystem.py"
WRITING = [
    ("write", "torch/serialization.py", 850),
    ("_write_item", DCP, 160),
    ("_write_files_from_queue", DCP, 312),
    ("write_data", DCP, 590),
    ("save", "torch/distributed/checkpoint/state_dict_saver.py", 150),
    ("save_checkpoint", "megatron/training/checkpointing.py", 480),
] + BASE[1:]
BARRIER = [
    ("barrier", "torch/distributed/distributed_c10d.py", 4160),
    ("save_checkpoint", "megatron/training/checkpointing.py", 500),
] + BASE[1:]
TOPOLOGY = grid(4, 4, 2, 2, 4)


def _run(stack_of, resume_at: float | None = None, until: float = 400.0, late: int = 0):
    """Steps every 2 s to 40 s, a save from then (stacks at 110 s, the last ``late`` ranks' at 150 s,
    past the collection's 30 s), steps again from ``resume_at``."""
    ranks = TOPOLOGY.by_rank
    events = [step_event(2.0 * n + 0.001 * r, TOPOLOGY, r, n) for n in range(1, 21) for r in ranks]
    if resume_at is not None:
        events += [step_event(resume_at + 2.0 * k + 0.001 * r, TOPOLOGY, r, 20 + k) for k in range(1, 30) for r in ranks]
    events += [beat_event(t, node) for t in range(0, int(until), 5) for node in TOPOLOGY.nodes]
    events += [
        stack_event((150.0 if r >= len(ranks) - late else 110.0) + 0.01 * r, TOPOLOGY, r, pyspy_dump(stack_of(r), pid=2000 + r))
        for r in ranks
    ]
    book = JobBook()
    book.update(TOPOLOGY.to_event(JOB, T0))
    det = ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig()))
    return run_detector(det, events, until=until), det


def test_every_rank_writing_its_checkpoint_is_recorded_not_reattempted():
    out, _ = _run(lambda r: WRITING, resume_at=280.0, until=330.0)
    assert [d.action for d in out] == [Action.CAPTURE_STACKS, Action.NONE]
    assert "writing their checkpoint" in out[1].detail and "a save under way" in out[1].detail


def test_a_save_that_goes_on_is_not_suspected_again_within_the_patience():
    out, _ = _run(lambda r: WRITING, until=900.0)
    assert [d.action for d in out] == [Action.CAPTURE_STACKS, Action.NONE]


def test_a_save_still_not_done_after_the_patience_is_an_alert_never_an_eviction():
    out, _ = _run(lambda r: WRITING if r == 5 else BARRIER, until=1200.0)
    actions = [d.action for d in out]
    assert actions == [Action.CAPTURE_STACKS, Action.NONE, Action.CAPTURE_STACKS, Action.ALERT]
    assert out[2].ts - out[1].ts >= HangConfig().writing_patience_s
    assert out[3].nodes == (TOPOLOGY.by_rank[5].node,) and "has not finished" in out[3].detail


def test_after_the_save_the_job_is_watched_again():
    # It stepped again at 280 s: a stall after that is suspected as any (its stacks are not in),
    # once it outlasts twice the save's pause (HangConfig.gap_margin: the job pauses that long).
    out, det = _run(lambda r: WRITING, resume_at=280.0, until=900.0)
    assert [d.action for d in out][:3] == [Action.CAPTURE_STACKS, Action.NONE, Action.CAPTURE_STACKS]
    assert det.hang.threshold(JOB) > 2 * 240 and out[2].ts - out[2].onset >= det.hang.threshold(JOB)


def test_one_rank_writing_the_whole_state_while_the_others_wait_in_the_barrier_is_a_save():
    out, _ = _run(lambda r: WRITING if r == 5 else BARRIER)
    assert [d.action for d in out] == [Action.CAPTURE_STACKS, Action.NONE]
    assert out[1].ranks == (5,) and "a save under way" in out[1].detail


def test_one_rank_computing_while_the_others_wait_in_the_barrier_is_judged_as_any_hang():
    out, _ = _run(lambda r: SLOW_COMPUTE if r == 5 else BARRIER)
    assert [d.action for d in out] == [Action.CAPTURE_STACKS, Action.EVICT]
    assert out[1].nodes == (TOPOLOGY.by_rank[5].node,)


def test_dumps_that_come_after_the_saves_verdict_stay_the_hangs():
    # The verdict is due 30 s after the capture with 12 of 16 stacks in; the 4 that trail it belong
    # to the same capture, never to a fail-slow round of their own: the stall stays open to them.
    out, det = _run(lambda r: WRITING if r == 5 else BARRIER, late=4)
    assert [(d.fault, d.action) for d in out] == [("job_hang", Action.CAPTURE_STACKS), ("job_hang", Action.NONE)]
    assert det.hang.wants_dumps(JOB)
