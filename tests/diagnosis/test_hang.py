"""Hang detection: stall → capture_stacks suspicion → dumps → evict the outliers' group (diagnosis.hang.detector)."""

from __future__ import annotations

import pytest

from bench.testbed.stack_samples import (
    GRAD_SYNC,
    JOB,
    T0,
    beat_event,
    event,
    faulthandler_dump,
    fig7_dumps,
    grid,
    pyspy_dump,
    run_detector,
    stack_event,
    step_event,
)
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitFaultDetector
from faultlens.diagnosis.hang.detector import HangConfig
from faultlens.events.envelope import InvalidEvent

TOPO = grid(16, 2, tp=2, pp=4, dp=4)
STUCK = 7  # pp stage 3 of pipeline pp:1


def _detector(**hang):
    book = JobBook()
    book.update(TOPO.to_event(JOB, T0))
    from faultlens.diagnosis.engine.implicit import ImplicitConfig

    return ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig(**hang)))


def _training(until_step: int, stop_rank: int | None = STUCK, beats_until: float = 300.0, resume_at: float | None = None):
    """Steps every 2 s; at the last step ``stop_rank`` does not report; heartbeats every 10 s."""
    events = []
    for n in range(1, until_step + 1):
        for r in range(32):
            if n == until_step and r == stop_rank:
                continue
            events.append(step_event(2.0 * n + 0.001 * r, TOPO, r, n))
    if resume_at is not None:
        for r in range(32):
            events.append(step_event(resume_at, TOPO, r, until_step + 1))
    t = 0.0
    while t <= beats_until:
        for node in TOPO.nodes:
            events.append(beat_event(t, node))
        t += 10.0
    return events


def test_stall_raises_one_suspicion_then_dumps_evict_the_pipeline():
    det = _detector()
    events = _training(20)
    dumps = fig7_dumps(TOPO, STUCK)
    stack_ids = []
    for r, text in dumps.items():
        e = stack_event(105.0 + 0.01 * r, TOPO, r, text)
        stack_ids.append(e.id)
        events.append(e)
    out = run_detector(det, events, until=200)
    suspicions = [d for d in out if d.action == "capture_stacks"]
    finals = [d for d in out if d.action == "evict"]
    assert len(suspicions) == 1 and len(finals) == 1 and len(out) == 2
    s = suspicions[0]
    assert s.fault == "job_hang" and s.confidence == pytest.approx(0.6)
    assert s.nodes == TOPO.nodes and s.ranks == (STUCK,)
    assert s.onset == pytest.approx(T0 + 40.031)  # the last step progress
    assert 100 <= s.ts - T0 <= 102  # max(5 × 2 s, 60 s floor) after the last step
    assert "lowest last step 19" in s.detail
    f = finals[0]
    pipeline = TOPO.group_id(STUCK, "pp")
    assert f.fault == "job_hang" and f.group == f"pp:{pipeline}"
    assert f.nodes == TOPO.group_nodes("pp", pipeline) and set(f.ranks) == set(TOPO.group_ranks("pp", pipeline))
    assert f.ts == pytest.approx(T0 + 105.31)  # decided on the last dump, not the timeout
    assert set(f.evidence) >= set(stack_ids) and f.confidence > 0.8
    assert "all_gather_into_tensor" in f.detail


def test_dumps_just_before_the_suspicion_belong_to_the_stall():
    # A trace's dumps can precede the detector's tick: they are claimed by the stall, not by fail-slow.
    det = _detector()
    events = _training(20)
    events += [stack_event(100.5, TOPO, r, text) for r, text in fig7_dumps(TOPO, STUCK).items()]
    out = run_detector(det, events, until=200)
    assert [(d.fault, d.action) for d in out] == [("job_hang", "capture_stacks"), ("job_hang", "evict")]
    assert out[1].group == f"pp:{TOPO.group_id(STUCK, 'pp')}" and out[1].ts == out[0].ts == T0 + 101


def test_threshold_follows_the_median_step_time():
    det = _detector(k=5.0, floor_s=1.0)
    events = [step_event(10.0 * n + 0.01 * r, TOPO, r, n, step_time_s=10.0) for n in range(1, 6) for r in range(32)]
    events += [beat_event(t, TOPO.nodes[0]) for t in range(0, 200, 5)]
    out = run_detector(det, events, until=120)
    assert det.hang.threshold(JOB) == pytest.approx(50.0)
    (s,) = out
    assert s.ts - s.onset == pytest.approx(50.0, abs=1.0)


def test_no_dumps_and_only_the_first_stopped_rank_is_an_alert_not_an_eviction():
    det = _detector(collect_timeout_s=30.0)
    out = run_detector(det, _training(20), until=200)
    assert [d.action for d in out] == ["capture_stacks", "alert"]
    f = out[1]
    assert f.nodes == (TOPO.by_rank[STUCK].node,) and f.ranks == (STUCK,)
    assert f.confidence < 0.5 and "no stack dump arrived" in f.detail and "alert for inspection" in f.detail
    # The 30 s timeout, then the job's next beat (t=140): the dumps are missing, not held up with a stopped stream.
    assert f.ts - out[0].ts == pytest.approx(39.0)


def test_every_rank_stopped_together_and_no_dumps_means_reattempt_not_eviction():
    det = _detector()
    out = run_detector(det, _training(20, stop_rank=None), until=200)
    assert [d.action for d in out] == ["capture_stacks", "reattempt"]
    assert "no culprit" in out[1].detail


def test_stepping_again_clears_the_suspicion_and_a_new_stall_is_a_new_one():
    det = _detector()
    events = _training(20, resume_at=110.0, beats_until=400)
    out = run_detector(det, events, until=400)
    suspicions = [d for d in out if d.action == "capture_stacks"]
    # One suspicion for the first stall (before 110 s), none repeated, a new one for the second stall.
    assert len(suspicions) == 2
    assert suspicions[0].ts < T0 + 110 < suspicions[1].ts
    assert suspicions[1].onset == pytest.approx(T0 + 110.0)
    # The first stall's collection was cancelled by the recovery: no verdict for it.
    finals = [d for d in out if d.action != "capture_stacks"]
    assert all(d.ts > suspicions[1].ts for d in finals)


def test_dead_processes_are_not_a_hang():
    det = _detector()
    events = _training(20, beats_until=-1.0)
    events += [beat_event(t, n, pids=[]) for t in range(50, 200, 10) for n in TOPO.nodes]
    assert run_detector(det, events, until=200) == []


def test_faulthandler_and_pyspy_dumps_of_one_rank_count_once_with_pyspy_kept():
    det = _detector()
    events = _training(20)
    dumps = fig7_dumps(TOPO, STUCK)
    for r, text in dumps.items():
        events.append(stack_event(104.0, TOPO, r, faulthandler_dump(GRAD_SYNC), tool="faulthandler"))
        events.append(stack_event(105.0, TOPO, r, text))
    out = run_detector(det, events, until=200)
    final = [d for d in out if d.action == "evict"][0]
    assert final.group == f"pp:{TOPO.group_id(STUCK, 'pp')}"


def test_faulthandler_only_dumps_decide_after_the_pyspy_grace():
    det = _detector(pyspy_grace_s=5.0)
    events = _training(20)
    events += [stack_event(105.0, TOPO, r, text, tool="faulthandler")
               for r, text in fig7_dumps(TOPO, STUCK, tool="faulthandler").items()]
    out = run_detector(det, events, until=200)
    final = out[-1]
    assert final.action == "evict" and final.group == f"pp:{TOPO.group_id(STUCK, 'pp')}"
    assert final.ts == pytest.approx(T0 + 110.0)


def test_missing_dumps_are_blamed_when_the_dumps_agree_but_one_capture_only_alerts():
    # The weakest evidence (diagnosis.hang.weak_evidence; tests/diagnosis/test_hang_evidence.py has
    # the second capture and its corroboration).
    det = _detector()
    events = _training(20)
    silent = TOPO.group_ranks("tp", 6)
    for r in range(32):
        if r not in silent:
            events.append(stack_event(105.0, TOPO, r, fig7_dumps(TOPO, STUCK)[0]))
    out = run_detector(det, events, until=199)
    final = out[-1]
    assert final.action == "alert" and final.group == "tp:6" and final.ranks == silent
    assert "gave no usable dump" in final.detail and "capturing every rank's stack again" in final.detail


def test_malformed_stack_dump_is_an_invalid_event():
    det = _detector()
    with pytest.raises(InvalidEvent, match="data.rank"):
        det.observe(event(1.0, "n000", "stack", "stack_dump", dump="x"))
    with pytest.raises(InvalidEvent, match="data.dump"):
        det.observe(event(1.0, "n000", "stack", "stack_dump", rank=3))
    # A step without a rank is skipped here (the training rules own its dead letter).
    assert det.observe(event(1.0, "n000", "train", "step", step=3)) == []


def test_restart_forgets_the_old_incarnation():
    det = _detector()
    out = run_detector(det, _training(20), until=101)
    assert [d.action for d in out] == ["capture_stacks"]
    det.restarted(JOB)
    # The dropped collection never times out into a verdict, and no stall is seen before new steps.
    assert [d for t in range(102, 300) for d in det.tick(T0 + t)] == []
    assert not det.hang.wants_dumps(JOB)


def test_a_restart_that_never_reaches_its_first_step_is_a_hang_after_the_startup_allowance():
    det = _detector(startup_s=600.0)
    assert run_detector(det, _training(20, stop_rank=None, beats_until=50), until=50) == []
    det.restarted(JOB, at=T0 + 102)
    beats = [beat_event(t, node) for t in range(110, 1000, 10) for node in TOPO.nodes]
    # loading a checkpoint for ten minutes is not a hang
    assert run_detector(det, [b for b in beats if b.ts < T0 + 700], start=102, until=699) == []
    [suspicion] = run_detector(det, [b for b in beats if T0 + 700 <= b.ts < T0 + 705], start=700, until=704)
    assert (suspicion.fault, suspicion.action, suspicion.onset) == ("job_hang", "capture_stacks", T0 + 102)
    assert "since the restart (no first step)" in suspicion.detail


def test_a_restart_whose_processes_are_gone_is_not_called_hung():
    det = _detector(startup_s=600.0)
    assert run_detector(det, _training(20, stop_rank=None, beats_until=50), until=50) == []
    det.restarted(JOB, at=T0 + 102)
    dead = [beat_event(t, node, pids=[]) for t in range(110, 1000, 10) for node in TOPO.nodes]  # the trainer died
    assert run_detector(det, dead, start=102, until=999) == []


# --- without stacks: GPU-side evidence, watchdog sequence numbers, failed captures (issue 12) ---
def _window(ts, node, util_min, power=0.35):
    from faultlens.diagnosis.peers.features import NodeWindow

    return NodeWindow(JOB, node, T0 + ts, {"util_min": util_min, "util": util_min, "power_ratio": power}, 10)


def _idle_windows(det, culprit, times):
    out = []
    for ts in times:
        for node in TOPO.nodes:
            out += det.observe_window(_window(ts, node, 0.0 if node == culprit else 100.0, 0.1 if node == culprit else 0.35))
    return out


def test_every_rank_stopped_together_the_idle_gpus_node_is_named_and_looked_at_again():
    # Idle GPUs alone are the weakest evidence: an alert naming the node and a second capture.
    det = _detector(collect_timeout_s=30.0)
    culprit = TOPO.by_rank[STUCK].node
    events = _training(20, stop_rank=None)
    out = run_detector(det, [e for e in events if e.ts <= T0 + 85], until=85)
    out += _idle_windows(det, culprit, (50.0, 60.0, 70.0))
    out += run_detector(det, [e for e in events if e.ts > T0 + 85], start=86, until=199)
    final = [d for d in out if d.action != "capture_stacks"]
    assert [d.action for d in final] == ["alert"] and culprit in final[0].nodes
    assert "idle" in final[0].detail and "capturing every rank's stack again" in final[0].detail


def test_a_verdict_that_named_nobody_is_revisited_when_gpu_evidence_arrives():
    det = _detector(collect_timeout_s=30.0)
    culprit = TOPO.by_rank[STUCK].node
    out = run_detector(det, _training(20, stop_rank=None), until=200)
    assert [d.action for d in out if d.action != "capture_stacks"] == ["reattempt"]
    late = _idle_windows(det, culprit, (150.0, 160.0))
    # Heard once (the first window), with the second capture it asks for; never an eviction on it.
    assert [d.action for d in late] == ["alert"] and culprit in late[0].nodes
    assert "capturing every rank's stack again" in late[0].detail


def test_gpus_that_all_idle_or_all_spin_name_nobody():
    det = _detector(collect_timeout_s=30.0)
    out = run_detector(det, _training(20, stop_rank=None), until=200)
    for node in TOPO.nodes:
        out += det.observe_window(_window(70.0, node, 100.0))
    assert [d.action for d in out if d.action != "capture_stacks"] == ["reattempt"]


def test_watchdog_sequence_numbers_name_the_ranks_behind():
    det = _detector(collect_timeout_s=30.0)
    events = _training(20, stop_rank=None)
    for r in range(32):
        done = 499 if r == STUCK else 500
        events.append(event(100.0 + 0.01 * r, TOPO.by_rank[r].node, "nccl", "nccl_timeout", rank=r, seq=done + 1,
                            last_enqueued=done + 1, last_completed=done))
    out = run_detector(det, events, until=200)
    final = [d for d in out if d.action == "alert"]  # the watchdog alone evicts nobody (test_hang_evidence.py)
    assert final and TOPO.by_rank[STUCK].node in final[0].nodes and "NCCL watchdog" in final[0].detail


def test_failed_captures_answer_and_are_not_suspects():
    det = _detector(collect_timeout_s=30.0)
    events = _training(20, stop_rank=None)
    broken = [r for r in range(32) if TOPO.by_rank[r].node in TOPO.nodes[:2]]
    for r in broken:
        events.append(event(95.0, TOPO.by_rank[r].node, "stack", "stack_dump", rank=r, pid=None,
                            dump="py-spy: command not found", tool="py-spy", ok=False))
    for r in range(32):
        if r not in broken:
            events.append(stack_event(95.5, TOPO, r, pyspy_dump(GRAD_SYNC, pid=1000 + r)))
    out = run_detector(det, events, until=200)
    assert not [d for d in out if d.action == "evict"]


def test_the_ranks_whose_watchdog_never_fired_are_the_last_to_log():
    det = _detector(collect_timeout_s=30.0)
    events = _training(20, stop_rank=None)
    for r in range(32):
        if r != STUCK:
            events.append(event(100.0 + 0.01 * r, TOPO.by_rank[r].node, "nccl", "nccl_timeout", rank=r, seq=501,
                                last_enqueued=501, last_completed=500))
    out = run_detector(det, events, until=200)
    final = [d for d in out if d.action == "alert"]
    assert final and STUCK in final[0].ranks and "never reported" in final[0].detail


def test_a_failed_capture_waits_the_grace_for_the_trainers_own_dump_of_that_rank():
    """py-spy timed out on one node (ok: false), the hook's faulthandler dumps of its ranks come two
    seconds later: the verdict reads them, rather than deciding on the py-spy dumps alone."""
    det = _detector(collect_timeout_s=30.0, pyspy_grace_s=5.0)
    events = _training(20)
    node = TOPO.by_rank[STUCK].node
    broken = [r for r in range(32) if TOPO.by_rank[r].node == node]
    pyspy = fig7_dumps(TOPO, STUCK)
    handler = fig7_dumps(TOPO, STUCK, tool="faulthandler")
    for r in range(32):
        if r in broken:
            events.append(event(105.0, node, "stack", "stack_dump", rank=r, pid=None,
                                dump="py-spy: timed out", tool="py-spy", ok=False))
            events.append(stack_event(107.0, TOPO, r, handler[r], tool="faulthandler"))
        else:
            events.append(stack_event(105.0, TOPO, r, pyspy[r]))
    out = run_detector(det, events, until=200)
    final = out[-1]
    assert final.action == "evict" and final.group == f"pp:{TOPO.group_id(STUCK, 'pp')}"
    assert "32/32 ranks with a usable dump" in final.detail
    assert final.ts >= T0 + 107.0
