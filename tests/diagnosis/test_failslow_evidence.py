"""Fail-slow evicts only on evidence a person accepts (diagnosis.peers.slow_evidence): the blamed
machine's own hardware apart from its peers', or the same machine at separate looks over 20 minutes.
Stacks alone are an alert and a second look; a slowness that moves is the workload's."""

from __future__ import annotations

import random

from bench.testbed.stack_samples import GRAD_SYNC, JOB, SLOW_COMPUTE, T0, grid, pyspy_dump, run_detector, stack_event
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitFaultDetector
from faultlens.diagnosis.peers.features import NodeWindow
from faultlens.diagnosis.peers.slow_evidence import Look, SlowEvidenceConfig, SlowHistory, judge_look
from faultlens.events.diagnosis_record import Diagnosis

TOPO = grid(16, 2, tp=2, pp=4, dp=4)
SLOW, OTHER = 13, 22  # on different machines
NODE, OTHER_NODE = TOPO.by_rank[SLOW].node, TOPO.by_rank[OTHER].node
LOOKS = (102.0, 745.0, 1390.0)  # the first rounds, and the answers to each second look ~600 s after the last


def _detector() -> ImplicitFaultDetector:
    book = JobBook()
    book.update(TOPO.to_event(JOB, T0))
    return ImplicitFaultDetector(book)


def _suspicion(confidence: float = 0.7) -> Diagnosis:
    return Diagnosis(
        job=JOB,
        ts=T0 + 100.0,
        onset=T0 + 70.0,
        fault="fail_slow",
        action="capture_stacks",
        nodes=(NODE,),
        ranks=TOPO.ranks_by_node[NODE],
        confidence=confidence,
        detail=f"{NODE} computed slower than its peers; no hardware drift explains it",
    )


def _look(at: float, slow: int, tag: str) -> list:
    """Five rounds 10 s apart: ``slow`` in its GEMM, every other rank in the gradient sync."""
    return [
        stack_event(at + 10 * k + 0.01 * r, TOPO, r, pyspy_dump(SLOW_COMPUTE if r == slow else GRAD_SYNC), request_id=f"{tag}{k}")
        for k in range(5)
        for r in range(32)
    ]


def _windows(det: ImplicitFaultDetector, clock_of_slow: float) -> None:
    """A minute of feature windows: every machine at full clocks and power but ``NODE`` at ``clock_of_slow``."""
    rng = random.Random(3)
    for start in range(60, 130, 10):
        for node in TOPO.nodes:
            clock = clock_of_slow if node == NODE else rng.uniform(0.985, 1.0)
            det.observe_window(
                NodeWindow(
                    JOB,
                    node,
                    T0 + start,
                    {
                        "sm_clock_ratio": clock,
                        "power_ratio": (0.6 if node == NODE and clock < 0.9 else 0.84) + rng.uniform(0, 0.01),
                        "temp_c": rng.gauss(61.0, 1.0),
                        "throttle": 0.0,
                        "compute_s": 2.1 if node == NODE else 1.55,
                    },
                    samples=1,
                )
            )


def _acting(out: list[Diagnosis]) -> list[tuple[str, tuple[str, ...]]]:
    return [(str(d.action), d.nodes) for d in out if d.action not in ("capture_stacks",)]


def test_stacks_alone_at_a_first_look_alert_and_ask_for_a_second_capture_ten_minutes_on():
    det = _detector()
    _windows(det, clock_of_slow=0.99)  # its counters like its peers'
    out = run_detector(det, _look(LOOKS[0], SLOW, "a"), start=95, until=760, diagnoses=[_suspicion()])
    (blame,) = [d for d in out if d.action not in ("capture_stacks",)]
    assert (blame.action, blame.nodes) == ("alert", (NODE,)) and "another capture in 600s" in blame.detail
    later = [d for d in out if d.action == "capture_stacks" and d.ts > blame.ts]
    assert later and 600.0 <= later[0].ts - blame.ts <= 602.0 and later[0].nodes == TOPO.nodes
    assert later[0].id.endswith(".look2.round1")  # remediation sends it as a stack round


def test_its_own_clocks_and_power_apart_from_its_peers_evict_at_the_first_look():
    det = _detector()
    _windows(det, clock_of_slow=0.71)
    out = run_detector(det, _look(LOOKS[0], SLOW, "a"), start=95, until=200, diagnoses=[_suspicion()])
    assert _acting(out) == [("evict", (NODE,))]
    assert "sm_clock_ratio 0.71 vs peer median" in out[-1].detail


def test_the_same_machine_at_three_looks_over_twenty_minutes_is_evicted_with_its_first_onset():
    det = _detector()
    _windows(det, clock_of_slow=0.99)
    events = [e for at in LOOKS for e in _look(at, SLOW, f"l{at:.0f}-")]
    out = run_detector(det, events, start=95, until=1460, diagnoses=[_suspicion()])
    assert _acting(out) == [("alert", (NODE,)), ("none", (NODE,)), ("evict", (NODE,))]
    final = out[-1]
    assert final.onset == T0 + 70.0 and "3 separate captures over 21 min" in final.detail


def test_a_slowness_that_moves_to_another_machine_is_the_workloads_and_evicts_nobody():
    det = _detector()
    _windows(det, clock_of_slow=0.99)
    # A hot expert on rank 13's machine, then on rank 22's; then still there a third look later.
    events = _look(LOOKS[0], SLOW, "a") + _look(LOOKS[1], OTHER, "b") + _look(LOOKS[2], OTHER, "c")
    out = run_detector(det, events, start=95, until=1460, diagnoses=[_suspicion()])
    acting = _acting(out)
    assert acting[:2] == [("alert", (NODE,)), ("alert", (OTHER_NODE,))] and "evict" not in {a for a, _ in acting}
    alerts = [d for d in out if d.action == "alert"]
    assert f"the slowness moved from {NODE}" in alerts[1].detail


def test_a_second_look_that_finds_nobody_slower_ends_it():
    det = _detector()
    _windows(det, clock_of_slow=0.99)
    calm = [
        stack_event(LOOKS[1] + 10 * k + 0.01 * r, TOPO, r, pyspy_dump(GRAD_SYNC), request_id=f"b{k}")
        for k in range(5)
        for r in range(32)
    ]
    out = run_detector(det, _look(LOOKS[0], SLOW, "a") + calm, start=95, until=1460, diagnoses=[_suspicion()])
    assert _acting(out) == [("alert", (NODE,)), ("none", (NODE,))] and "no longer lags" in out[-1].detail
    assert not [d for d in out if d.action == "capture_stacks" and d.ts > T0 + LOOKS[1] + 60]  # no third look


def test_a_spare_slow_at_the_evicted_machines_ranks_is_the_workload_not_a_second_bad_machine():
    config = SlowEvidenceConfig()
    history = SlowHistory()
    ranks = (13,)
    kinds = [judge_look(history, Look(at, -30.0, ("n006",), ranks, "tp:6"), config) for at in (0.0, 620.0, 1240.0)]
    assert [j.kind for j in kinds] == ["first", "again", "persistent"] and kinds[-1].onset == -30.0
    # The machine was evicted; its spare takes rank 13 and is the slowest at the next look.
    again = judge_look(history, Look(1900.0, 1860.0, ("spare-1",), ranks, "tp:6"), config)
    assert again.kind == "moved" and "n006" in again.why


def test_a_second_look_nobody_answered_is_asked_once_more_and_the_chain_goes_on():
    # The look at 743 s gets no stack round (the blamed machine's agent down, a capture refused): a
    # missed look must not end a chain that persists, nor stand in for an answer.
    det = _detector()
    _windows(det, clock_of_slow=0.99)
    events = _look(LOOKS[0], SLOW, "a") + _look(1410.0, SLOW, "c") + _look(2030.0, SLOW, "d")
    out = run_detector(det, events, start=95, until=2100, diagnoses=[_suspicion()])
    assert _acting(out) == [("alert", (NODE,)), ("none", (NODE,)), ("none", (NODE,)), ("evict", (NODE,))]
    missed = out.index(next(d for d in out if "got no answer" in d.detail))
    assert "another in 600s" in out[missed].detail
    asked = [d for d in out[missed:] if d.action == "capture_stacks"]
    assert asked and 599.0 <= asked[0].ts - out[missed].ts <= 602.0
    assert "3 separate captures over 32 min" in out[-1].detail  # three answered looks, not two


def test_two_answered_looks_twenty_minutes_apart_around_a_missed_one_do_not_evict():
    det = _detector()
    _windows(det, clock_of_slow=0.99)
    out = run_detector(det, _look(LOOKS[0], SLOW, "a") + _look(1410.0, SLOW, "c"), start=95, until=1500,
                       diagnoses=[_suspicion()])
    assert _acting(out) == [("alert", (NODE,)), ("none", (NODE,)), ("none", (NODE,))]
    assert "blamed again (2 looks over" in out[-1].detail


def test_a_look_missed_twice_leaves_the_alert_standing_and_asks_no_more():
    det = _detector()
    _windows(det, clock_of_slow=0.99)
    out = run_detector(det, _look(LOOKS[0], SLOW, "a"), start=95, until=2700, diagnoses=[_suspicion()])
    assert _acting(out) == [("alert", (NODE,)), ("none", (NODE,)), ("none", (NODE,))]
    assert "no answer again: the alert stands" in out[-1].detail
    assert not [d for d in out if d.action == "capture_stacks" and d.ts > out[-1].ts]
