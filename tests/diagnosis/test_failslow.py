"""Fail-slow: repeated stack rounds → the degrader group, or no blame (diagnosis.peers.failslow)."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest

from bench.testbed.stack_samples import (
    GRAD_SYNC,
    JOB,
    PP_RECV,
    SLOW_COMPUTE,
    T0,
    grid,
    pyspy_dump,
    run_detector,
    stack_event,
)
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitFaultDetector
from faultlens.events.diagnosis_record import Diagnosis

TOPO = grid(16, 2, tp=2, pp=4, dp=4)
SLOW = 13
# A suspicion that stood on a hardware drift beside the slowdown (diagnosis.peers.anomaly): the
# rounds' blame of its machine may evict at once (diagnosis.peers.slow_evidence).
HARDWARE_BACKED = 0.8


def _detector() -> ImplicitFaultDetector:
    book = JobBook()
    book.update(TOPO.to_event(JOB, T0))
    return ImplicitFaultDetector(book)


def _suspicion(ts: float, confidence: float = 0.7) -> Diagnosis:
    node = TOPO.by_rank[SLOW].node
    return Diagnosis(
        job=JOB,
        ts=T0 + ts,
        onset=T0 + ts - 30,
        fault="fail_slow",
        action="capture_stacks",
        nodes=(node,),
        ranks=TOPO.ranks_by_node[node],
        confidence=confidence,
        detail="n006 drifted from its peers",
    )


def _round(ts: float, slow: dict[int, list], *, request_id: str | None, rng: random.Random, noise: int = 2):
    """One stack round: ``slow`` ranks on their frames, ``noise`` random healthy ranks caught elsewhere."""
    caught = set(rng.sample([r for r in range(32) if r not in slow], noise))
    events = []
    for r in range(32):
        frames = slow.get(r) or (PP_RECV if r in caught else GRAD_SYNC)
        events.append(stack_event(ts + 0.01 * r, TOPO, r, pyspy_dump(frames, pid=5000 + r), request_id=request_id))
    return events


def test_five_rounds_blame_the_degrader_group_and_requests_are_spaced():
    det = _detector()
    rng = random.Random(4)
    # The slow rank is caught computing in 4 of 5 rounds; noise differs every round.
    events = []
    for k in range(5):
        slow = {SLOW: SLOW_COMPUTE} if k != 2 else {}
        events += _round(102.0 + 10 * k, slow, request_id=f"req{k}", rng=rng)
    out = run_detector(det, events, start=95, until=200, diagnoses=[_suspicion(100.0, HARDWARE_BACKED)])
    requests = [d for d in out if d.action == "capture_stacks"]
    assert [d.detail.split(":")[0] for d in requests] == [f"stack round {k}/5" for k in range(1, 6)]
    assert all(d.confidence < 0.5 and d.fault == "fail_slow" and d.nodes == TOPO.nodes for d in requests)
    assert all(b.ts - a.ts >= 10.0 for a, b in pairwise(requests))
    (final,) = [d for d in out if d.action == "evict"]
    tp = TOPO.group_id(SLOW, "tp")
    assert final.fault == "fail_slow" and final.group == f"tp:{tp}"
    assert final.nodes == TOPO.group_nodes("tp", tp) == (TOPO.by_rank[SLOW].node,)
    assert final.ranks == (SLOW,) and final.onset == pytest.approx(T0 + 70.0)
    assert "[1, 1, 0, 1, 1]" in final.detail and 0.5 < final.confidence < 0.95
    assert final.evidence  # the outliers' dump events


def test_trace_rounds_without_a_suspicion_or_request_ids_use_time_windows():
    det = _detector()
    rng = random.Random(9)
    pipeline = TOPO.group_ranks("pp", 3)
    events = []
    for k in range(5):
        events += _round(10.0 + 12 * k, {r: SLOW_COMPUTE for r in pipeline}, request_id=None, rng=rng)
    out = run_detector(det, events, start=0, until=120)
    # Stacks alone, no hardware sign and a first look: an alert naming the group, no eviction.
    assert [d.action for d in out] == ["alert"] and "no eviction on a first look" in out[0].detail
    assert out[0].group == "pp:3" and set(out[0].ranks) == set(pipeline)


def test_no_consistent_outlier_group_blames_nobody():
    det = _detector()
    rng = random.Random(1)
    events = []
    for k in range(5):
        events += _round(102.0 + 10 * k, {}, request_id=f"r{k}", rng=rng, noise=3)
    out = run_detector(det, events, start=95, until=300, diagnoses=[_suspicion(100.0)])
    assert [d for d in out if d.action != "capture_stacks"] == []


def test_without_any_round_a_corroborated_suspicion_stands():
    det = _detector()
    out = run_detector(det, [], start=95, until=200, diagnoses=[_suspicion(100.0, confidence=0.82)])
    final = [d for d in out if d.action != "capture_stacks"]
    assert [d.action for d in final] == ["evict"]
    assert final[0].nodes == (TOPO.by_rank[SLOW].node,) and final[0].confidence == pytest.approx(0.82)
    assert "no stack round arrived" in final[0].detail and "two independent signals" in final[0].detail
    assert final[0].ts - T0 == pytest.approx(160.0)  # no_rounds_timeout_s after the suspicion


def test_without_any_round_a_slowdown_alone_is_an_alert_not_an_eviction():
    det = _detector()
    out = run_detector(det, [], start=95, until=200, diagnoses=[_suspicion(100.0, confidence=0.62)])
    final = [d for d in out if d.action != "capture_stacks"]
    assert [d.action for d in final] == ["alert"]
    assert final[0].nodes == (TOPO.by_rank[SLOW].node,) and "alert for inspection" in final[0].detail


def test_own_requests_and_other_faults_do_not_start_campaigns():
    det = _detector()
    (request,) = det.observe_diagnosis(_suspicion(100.0))
    assert det.observe_diagnosis(request) == []
    other = Diagnosis(job=JOB, ts=T0 + 101, onset=T0 + 100, fault="job_hang", action="capture_stacks", nodes=("n001",))
    assert det.observe_diagnosis(other) == []
    # A second suspicion for the same job joins the running campaign: no second request burst.
    assert det.observe_diagnosis(_suspicion(101.0)) == []


def test_dumps_during_a_hang_do_not_feed_fail_slow_rounds():
    from bench.testbed.stack_samples import beat_event, step_event

    det = _detector()
    events = [step_event(2.0 * n + 0.001 * r, TOPO, r, n) for n in range(1, 6) for r in range(32)]
    events += [beat_event(t, node) for t in range(0, 200, 10) for node in TOPO.nodes]
    rng = random.Random(2)
    for k in range(5):  # dumps arrive only after the hang suspicion (at ~70 s)
        events += _round(80.0 + 10 * k, {SLOW: SLOW_COMPUTE}, request_id=None, rng=rng)
    out = run_detector(det, events, start=0, until=200)
    assert {d.fault for d in out} == {"job_hang"}


def test_stragglers_and_thin_rounds_do_not_count_as_rounds():
    det = _detector()
    rng = random.Random(5)
    events = []
    for k in range(5):
        events += _round(102.0 + 10 * k, {SLOW: SLOW_COMPUTE}, request_id=f"q{k}", rng=rng)
        # A late duplicate of round k's request and a thin window of 3 dumps without a request id.
        events.append(stack_event(102.0 + 10 * k + 9.5, TOPO, 3, pyspy_dump(GRAD_SYNC), request_id=f"q{k}"))
    events += [stack_event(160.0 + 0.1 * r, TOPO, r, pyspy_dump(GRAD_SYNC)) for r in range(3)]
    out = run_detector(det, events, start=95, until=300, diagnoses=[_suspicion(100.0, HARDWARE_BACKED)])
    (final,) = [d for d in out if d.action == "evict"]
    assert final.ranks == (SLOW,) and "[1, 1, 1, 1, 1]" in final.detail


def test_a_restart_keeps_a_suspicion_whose_suspects_stay_and_drops_one_whose_suspects_left():
    det = _detector()
    requests = det.observe_diagnosis(_suspicion(0))
    assert requests and det.failslow.active(JOB)
    # An unrelated restart (another node swapped): the slow machine is still there, so is the suspicion.
    det.restarted(JOB, nodes_out=["some-other-node"])
    assert det.failslow.active(JOB)
    # Evicting the suspect ends it.
    det.restarted(JOB, nodes_out=[TOPO.by_rank[SLOW].node])
    assert not det.failslow.active(JOB)


def test_after_a_conclusion_only_suspicions_of_the_same_machines_are_folded():
    det = _detector()
    fs = det.failslow
    first = _suspicion(0)
    fs.observe_diagnosis(first)
    fs._finish(JOB, T0 + 100)  # the campaign concluded (as after its verdict)
    assert fs.observe_diagnosis(_suspicion(150)) == []  # the same slow machine again: folded
    other_node = next(n for n in TOPO.nodes if n not in first.nodes)
    other = Diagnosis(
        job=JOB,
        ts=T0 + 160,
        onset=T0 + 130,
        fault="fail_slow",
        action="capture_stacks",
        nodes=(other_node,),
        confidence=0.8,
        detail=f"{other_node} drifted",
    )
    assert fs.observe_diagnosis(other) and fs.active(JOB)  # another machine: its own rounds


def _round_without(ts: float, missing: tuple[int, ...], *, request_id: str, rng: random.Random):
    """A round in which the ranks ``missing`` sent no stack (their capture failed)."""
    return [e for e in _round(ts, {}, request_id=request_id, rng=rng) if e.data["rank"] not in missing]


def test_a_corroborated_suspicion_whose_stacks_never_came_stands_and_is_not_dropped():
    """The slow node's py-spy is broken: five rounds without its ranks say nothing about it."""
    det = _detector()
    rng = random.Random(5)
    suspects = TOPO.ranks_by_node[TOPO.by_rank[SLOW].node]
    events = [e for k in range(5) for e in _round_without(102.0 + 10 * k, suspects, request_id=f"req{k}", rng=rng)]
    out = run_detector(det, events, start=95, until=200, diagnoses=[_suspicion(100.0, confidence=0.9)])
    [final] = [d for d in out if d.action != "capture_stacks"]
    assert (final.fault, final.action, final.nodes) == ("fail_slow", "evict", (TOPO.by_rank[SLOW].node,))
    assert "stacks were missing" in final.detail


def test_rounds_that_saw_the_suspect_and_found_nothing_alert_a_corroborated_suspicion_never_evict():
    det = _detector()
    rng = random.Random(6)
    events = [e for k in range(5) for e in _round(102.0 + 10 * k, {}, request_id=f"req{k}", rng=rng)]
    out = run_detector(det, events, start=95, until=200, diagnoses=[_suspicion(100.0, confidence=0.9)])
    [final] = [d for d in out if d.action != "capture_stacks"]
    assert (final.fault, final.action) == ("fail_slow", "alert") and "not confirmed by stacks" in final.detail
    # a suspicion on one signal only is dropped as before
    det = _detector()
    out = run_detector(det, events, start=95, until=200, diagnoses=[_suspicion(100.0, confidence=0.7)])
    assert [d for d in out if d.action != "capture_stacks"] == []


def test_rounds_taken_after_the_steps_stopped_are_the_stalls_and_blame_nobody_as_slow():
    """A campaign is under way when the job hangs (pipeline pp:3 stuck); its last rounds catch
    the stall, not the slow machine, and must not evict the stuck pipeline as fail_slow."""
    from bench.testbed.stack_samples import step_event

    det = _detector()
    rng = random.Random(7)
    stuck = {r: SLOW_COMPUTE for r in TOPO.group_ranks("pp", 3)}
    steps = [step_event(t + 0.001 * r, TOPO, r, int(t)) for t in range(60, 111) for r in range(32)]
    events = steps + [e for k in range(5) for e in _round(112.0 + 10 * k, stuck, request_id=f"req{k}", rng=rng)]
    out = run_detector(det, events, start=95, until=200, diagnoses=[_suspicion(100.0, confidence=0.6)])
    verdicts = [d for d in out if d.fault == "fail_slow" and d.action != "capture_stacks"]
    assert verdicts and all(d.action == "alert" for d in verdicts), verdicts


def test_a_node_that_answers_no_training_process_closes_the_round_without_its_window():
    from tests.diagnosis.test_hang_no_trainer import GONE, agent_answer

    gone_ranks = set(TOPO.ranks_by_node[GONE])
    det = _detector()
    rng = random.Random(4)
    events = []
    for k in range(5):
        start = 102.0 + 10 * k
        events += [
            e for e in _round(start, {SLOW: SLOW_COMPUTE}, request_id=f"req{k}", rng=rng) if e.data["rank"] not in gone_ranks
        ]
        answer = agent_answer(GONE, start + 0.5)
        events.append(
            type(answer)(
                ts=answer.ts,
                job=answer.job,
                node=answer.node,
                source=answer.source,
                kind=answer.kind,
                data={**answer.data, "request_id": f"req{k}"},
                id=f"gone{k}",
            )
        )
    out = run_detector(det, events, start=95, until=200, diagnoses=[_suspicion(100.0, HARDWARE_BACKED)])
    (final,) = [d for d in out if d.action == "evict"]
    assert final.nodes == (TOPO.by_rank[SLOW].node,) and GONE not in final.nodes
    # The fifth round closed as the last rank answered (t = 142.5), not a window (10 s) later.
    assert final.ts < T0 + 145.0
