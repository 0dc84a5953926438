"""A rank slower because it had more work (an MoE's hot expert) is the workload's, not a slow machine
(diagnosis.peers.slow_work): where the blamed ranks' steps carry ``work``, fail-slow compares their
compute time per unit of it with their peers'. More work at their time per unit: an alert at every
look, never an eviction. The same work, slower: said in the detail, and the look goes on as without
``work`` (it is the slowdown itself, not a second signal). Without ``work``: as before."""

from __future__ import annotations

import pytest

from bench.testbed.stack_samples import JOB, event, run_detector
from faultlens.diagnosis.peers.slow_work import RankWork, StepWork, WorkConfig, judge_work
from faultlens.events.payloads import check_payload
from faultlens.trainer_hooks.hook import TrainerHook
from tests.diagnosis.test_failslow_evidence import LOOKS, NODE, SLOW, TOPO, _acting, _detector, _look, _suspicion, _windows
from tests.trainer_hooks.test_flight_recorder_hook import _Producer

PEERS = {r: RankWork(steps=12, work=12 * 4096.0, compute_s=12 * 1.5) for r in range(32) if r != SLOW}


def _steps(until: float, *, work_of_slow: float | None, compute_of_slow: float, with_work: bool = True) -> list:
    """Every rank's steps every 5 s from 0 to ``until``: 4096 units of work in 1.5 s of compute, but
    rank SLOW's ``compute_of_slow`` (and ``work_of_slow``); ``with_work`` False: no step carries work."""
    out = []
    for k in range(int(until // 5)):
        for r in range(32):
            data = {"rank": r, "step": k, "loss": 2.0, "step_time_s": 2.2, "tokens": 4096,
                    "compute_s": compute_of_slow if r == SLOW else 1.5}  # fmt: skip
            if with_work:
                data["work"] = work_of_slow if r == SLOW else 4096.0
            out.append(event(5.0 * k + 0.001 * r, TOPO.by_rank[r].node, "train", "step", **data))
    return out


# --- the pure judgement -------------------------------------------------------------------------
def test_more_work_at_the_peers_time_per_unit_is_the_workloads():
    ranks = {**PEERS, SLOW: RankWork(12, 12 * 4096.0 * 1.4, 12 * 1.5 * 1.4)}
    verdict = judge_work([SLOW], ranks)
    assert verdict is not None and verdict.kind == "workload"
    assert "rank 13 did 1.4x its peers' work" in verdict.why and "1.00x theirs" in verdict.why


def test_the_same_work_slower_is_the_machines():
    ranks = {**PEERS, SLOW: RankWork(12, 12 * 4096.0, 12 * 1.5 * 1.35)}
    verdict = judge_work([SLOW], ranks)
    assert verdict is not None and verdict.kind == "machine"
    assert "rank 13 took 1.35x its peers' compute time per unit of work doing 1.00x their work" in verdict.why


def test_more_work_and_slower_per_unit_is_still_the_machines():
    ranks = {**PEERS, SLOW: RankWork(12, 12 * 4096.0 * 1.3, 12 * 1.5 * 1.3 * 1.25)}
    verdict = judge_work([SLOW], ranks)
    assert verdict is not None and verdict.kind == "machine"


@pytest.mark.parametrize(
    "ranks, blamed",
    [
        (PEERS, [SLOW]),  # the blamed rank's steps carry no work
        ({**{r: PEERS[r] for r in (0, 1, 2)}, SLOW: RankWork(12, 12 * 4096.0 * 1.4, 12 * 2.1)}, [SLOW]),  # 3 peers
        ({**PEERS, SLOW: RankWork(2, 2 * 4096.0 * 1.4, 2 * 2.1)}, [SLOW]),  # two steps
        ({**PEERS, SLOW: RankWork(12, 12 * 4096.0, 12 * 1.5)}, [SLOW]),  # not slower in its steps: nothing to explain
        ({**PEERS, SLOW: RankWork(12, 12 * 4096.0 * 1.05, 12 * 1.5 * 1.1)}, [SLOW]),  # a little slower, a little more
        ({**PEERS, SLOW: RankWork(12, 12 * 4096.0 * 1.4, 12 * 2.1)}, []),
    ],
)
def test_steps_that_cannot_say_judge_nothing(ranks, blamed):
    assert judge_work(blamed, ranks) is None


def test_a_blamed_node_is_judged_by_its_slow_rank_and_the_others_on_it_are_not_peers():
    # A suspicion names every rank of the machine; only rank 13 has the hot expert.
    on_node = TOPO.ranks_by_node[NODE]
    ranks = {**PEERS, SLOW: RankWork(12, 12 * 4096.0 * 1.5, 12 * 1.5 * 1.5)}
    verdict = judge_work(on_node, ranks)
    assert verdict is not None and verdict.kind == "workload" and "rank 13 did 1.5x" in verdict.why
    assert not any(f"rank {r} " in verdict.why for r in on_node if r != SLOW)


def test_a_rank_is_set_against_its_own_pipeline_stage_where_costs_differ_by_stage():
    # Rank 13's stage holds the output layer: each of its ranks takes 1.3x the others' time per unit.
    stage = {p.rank: p.pp for p in TOPO.ranks}
    heavy = {r: RankWork(12, 12 * 4096.0, 12 * 1.5 * 1.3) for r in PEERS if stage[r] == stage[SLOW]}
    ranks = {**PEERS, **heavy, SLOW: RankWork(12, 12 * 4096.0 * 1.4, 12 * 1.5 * 1.3 * 1.4)}
    assert len(heavy) >= 4
    by_stage = judge_work([SLOW], ranks, stage=stage)
    assert by_stage is not None and by_stage.kind == "workload" and "rank 13 did 1.4x" in by_stage.why
    job_wide = judge_work([SLOW], ranks)  # against the whole job it looks 1.3x slower per unit
    assert job_wide is not None and job_wide.kind == "machine"


def test_step_work_keeps_only_steps_with_work_and_compute_of_the_lookback():
    store = StepWork(WorkConfig(span_s=60.0))
    for e in _steps(300.0, work_of_slow=8192.0, compute_of_slow=3.0):
        store.observe(e)
    ranks = store.ranks(JOB, now=e.ts)
    assert ranks[SLOW].per_step == 8192.0 and ranks[SLOW].per_unit == pytest.approx(3.0 / 8192.0)
    assert 12 <= ranks[0].steps <= 14  # the last minute's, 5 s apart (its buckets: 60-70 s)
    bare = StepWork()
    for e in _steps(60.0, work_of_slow=None, compute_of_slow=3.0, with_work=False):
        bare.observe(e)
    assert bare.ranks(JOB, now=e.ts) == {} and bare.judge(JOB, [SLOW], e.ts) is None


def test_a_look_reads_its_own_minute_of_steps_or_back_to_three_steps_of_a_long_step():
    store = StepWork()
    for k in range(30):  # 20 s steps; rank 0's work doubles for its last 3 steps (the look's minute)
        for r in range(2):
            data = {"rank": r, "step": k, "compute_s": 1.0, "work": 2.0 if r == 0 and k >= 27 else 1.0}
            store.observe(event(20.0 * k, TOPO.by_rank[r].node, "train", "step", **data))
    ranks = store.ranks(JOB, now=event(20.0 * 29 + 5.0, "n", "train", "step").ts)
    assert ranks[0] == RankWork(3, 6.0, 3.0)  # not diluted by the 27 steps before
    long = StepWork()
    for k in range(20):  # 45 s steps: a minute holds one or two
        long.observe(event(45.0 * k, TOPO.by_rank[0].node, "train", "step", rank=0, step=k, compute_s=9.0, work=1.0))
    assert long.ranks(JOB, now=event(45.0 * 19, "n", "train", "step").ts)[0].steps == 3


def test_the_hook_sends_work_only_when_the_trainer_gives_a_number_it_can_be():
    producer = _Producer()
    hook = TrainerHook(job=JOB, rank=13, node="n006", settings=None, listen=False, producer=producer, flight_recorder=False)
    hook.step(loss=2.0, compute_s=2.1, work=5734.4)
    hook.step(loss=2.0, compute_s=2.1)
    hook.step(loss=2.0, compute_s=2.1, work=float("nan"))
    sent = [e for e in producer.sent if e.kind == "step"]
    assert [e.data.get("work") for e in sent] == [5734.4, None, None]
    assert "work" not in sent[1].data and "work" not in sent[2].data  # as before: no key at all
    store = StepWork()
    for e in sent:
        check_payload(e)
        store.observe(e)
    assert store.ranks(JOB, now=sent[-1].ts + 1.0) == {13: RankWork(1, 5734.4, 2.1)}


# --- through the detector ------------------------------------------------------------------------
FOUR_LOOKS = (*LOOKS, 2035.0)  # a hot expert on rank 13 for 40 minutes


def test_a_hot_expert_on_one_rank_for_forty_minutes_with_its_work_evicts_nobody():
    det = _detector()
    _windows(det, clock_of_slow=0.99)
    events = [e for at in FOUR_LOOKS for e in _look(at, SLOW, f"l{at:.0f}-")]
    events += _steps(2700.0, work_of_slow=4096.0 * 1.4, compute_of_slow=1.5 * 1.4)
    out = run_detector(det, events, start=95, until=2700, diagnoses=[_suspicion()])
    acting = _acting(out)
    assert acting == [("alert", (NODE,))] * 4
    for d in out:
        if d.action == "alert":
            assert "rank 13 did 1.4x its peers' work" in d.detail and "another capture in 600s" in d.detail
    last = [d for d in out if d.action == "alert"][-1]
    asked = [d for d in out if d.action == "capture_stacks" and d.ts > last.ts]
    assert asked and asked[0].id.endswith(".look5.round1") and 599.0 <= asked[0].ts - last.ts <= 602.0  # it goes on looking


def test_the_same_slowness_without_work_is_evicted_at_the_third_look_as_before():
    det = _detector()
    _windows(det, clock_of_slow=0.99)
    events = [e for at in LOOKS for e in _look(at, SLOW, f"l{at:.0f}-")]
    events += _steps(1460.0, work_of_slow=None, compute_of_slow=1.5 * 1.4, with_work=False)
    out = run_detector(det, events, start=95, until=1460, diagnoses=[_suspicion()])
    assert _acting(out) == [("alert", (NODE,)), ("none", (NODE,)), ("evict", (NODE,))]
    assert "3 separate captures over 21 min" in out[-1].detail and "work" not in out[-1].detail


def test_a_slow_machine_with_its_peers_work_goes_the_evidence_path_and_says_so():
    det = _detector()
    _windows(det, clock_of_slow=0.99)
    events = [e for at in LOOKS for e in _look(at, SLOW, f"l{at:.0f}-")]
    events += _steps(1460.0, work_of_slow=4096.0, compute_of_slow=1.5 * 1.4)
    out = run_detector(det, events, start=95, until=1460, diagnoses=[_suspicion()])
    assert _acting(out) == [("alert", (NODE,)), ("none", (NODE,)), ("evict", (NODE,))]
    assert "3 separate captures over 21 min" in out[-1].detail
    assert "rank 13 took 1.40x its peers' compute time per unit of work doing 1.00x their work" in out[-1].detail


def test_a_suspicion_on_a_hardware_drift_without_stacks_is_an_alert_when_the_work_explains_it():
    # A GPU doing 1.4x the work may run hot and hit its power cap: that drift is the work's too.
    det = _detector()
    events = _steps(200.0, work_of_slow=4096.0 * 1.4, compute_of_slow=1.5 * 1.4)
    out = run_detector(det, events, start=95, until=200, diagnoses=[_suspicion(confidence=0.8)])
    assert _acting(out) == [("alert", (NODE,))]
    assert "stand on two independent signals, but rank 13 did 1.4x its peers' work" in out[-1].detail
    bare = run_detector(_detector(), [], start=95, until=200, diagnoses=[_suspicion(confidence=0.8)])
    assert _acting(bare) == [("evict", (NODE,))]


def test_a_job_that_ended_or_restarted_keeps_no_steps_for_a_later_look():
    for forget in ("ended", "restarted"):
        det = _detector()
        events = _steps(90.0, work_of_slow=4096.0 * 1.4, compute_of_slow=1.5 * 1.4)
        run_detector(det, events, start=0, until=90)
        if forget == "ended":
            det.ended(JOB, events[-1].ts)
        else:
            det.restarted(JOB)
        out = run_detector(det, [], start=95, until=200, diagnoses=[_suspicion(confidence=0.8)])
        assert _acting(out) == [("evict", (NODE,))], forget  # as without work: nothing of the old steps is read
