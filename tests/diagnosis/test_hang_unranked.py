"""A node agent that found the training processes but could not read their ranks (its --rank-env
names a variable the trainer does not set) sends py-spy dumps with ``rank: null`` and a pid. They
are that node's answer (diagnosis.stacks.dump_set.UnrankedDump): the hang's collection stops waiting for
it, a person hears which node and what to fix, and no eviction ever rests on stacks that cannot
be placed in a parallel group."""

from __future__ import annotations

import pytest

from bench.testbed.stack_samples import (
    GRAD_SYNC,
    JOB,
    SLOW_COMPUTE,
    T0,
    beat_event,
    fig7_dumps,
    grid,
    pyspy_dump,
    run_detector,
    stack_event,
    step_event,
)
from faultlens.collectors.stack_capture import DumpResult, dump_event
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.hang.detector import HangConfig
from faultlens.diagnosis.hang.stack_reading import read_hang_stacks
from faultlens.diagnosis.stacks.dump_set import DumpSet, UnrankedDump, read_stack_answer, read_stack_dump
from faultlens.events.envelope import Envelope, InvalidEvent

TOPO = grid(16, 2, tp=2, pp=4, dp=4)
STUCK = 7  # Fig. 7: rank 7 (on n003) stuck in all_gather, its pipeline peers in isend/irecv
REQUEST = "cmd-3f9c2a"


def unranked_event(node: str, pid: int, text: str, at: float, *, rank_env: str = "SLURM_PROCID",
                   ok: bool = True) -> Envelope:
    """The agent's own event for a process it found but could not rank (collectors.stack_capture)."""
    real = dump_event(DumpResult(pid=pid, rank=None, dump=text, ok=ok), job=JOB, node=node, request_id=REQUEST,
                      ts=T0 + at, rank_env=rank_env)
    return Envelope(ts=real.ts, job=real.job, node=real.node, source=real.source, kind=real.kind,
                    data=dict(real.data), id=f"unranked-{node}-{pid}")


def node_dumps(texts: dict[int, str], unranked_nodes: tuple[str, ...], at: float) -> list[Envelope]:
    """Every rank's py-spy dump as its node's agent sends it; those of ``unranked_nodes`` carry no rank."""
    out = []
    for rank, text in sorted(texts.items()):
        node = TOPO.by_rank[rank].node
        if node in unranked_nodes:
            out.append(unranked_event(node, 1000 + rank, text, at + 0.01 * rank))
        else:
            out.append(stack_event(at + 0.01 * rank, TOPO, rank, text, request_id=REQUEST))
    return out


# --- reading ---------------------------------------------------------------------------------------
def test_a_dump_without_rank_but_with_a_pid_is_read_as_the_nodes_unplaced_dump():
    text = pyspy_dump(GRAD_SYNC, pid=51234)
    ev = unranked_event("n005", 51234, text, 10.0)
    assert ev.data["rank"] is None and ev.data["pid"] == 51234 and ev.data["rank_env"] == "SLURM_PROCID"
    read = read_stack_answer(ev)
    assert read == UnrankedDump(node="n005", pid=51234, dump=text, ok=True, event_id=ev.id, ts=ev.ts,
                                request_id=REQUEST, rank_env="SLURM_PROCID")
    with pytest.raises(InvalidEvent, match="data.rank"):
        read_stack_dump(ev)  # who needs a rank still gets none invented


def test_the_engine_takes_it_instead_of_dead_lettering_it():
    dead = []
    events = [TOPO.to_event(JOB, T0), unranked_event("n005", 51234, pyspy_dump(GRAD_SYNC, pid=51234), 10.0)]
    analyze(events, on_dead=lambda event, reason: dead.append(reason))
    assert dead == []


def test_a_node_has_answered_when_its_dumps_placed_or_not_are_as_many_as_its_ranks():
    # n005 holds ranks 10 and 11.
    dumps = DumpSet()
    first = read_stack_answer(unranked_event("n005", 500, pyspy_dump(GRAD_SYNC, pid=500), 1.0))
    assert dumps.add_answer(first) and not dumps.add_answer(first)  # redelivered: once
    assert dumps.answered(TOPO.ranks_by_node) == set()  # one of two processes so far
    assert dumps.unplaced(TOPO.ranks_by_node) == {"n005": (10, 11)}
    dumps.add(read_stack_dump(stack_event(1.1, TOPO, 11, pyspy_dump(GRAD_SYNC, pid=1011))))
    assert dumps.answered(TOPO.ranks_by_node) == {10, 11}
    assert dumps.unplaced(TOPO.ranks_by_node) == {"n005": (10,)}
    assert len(dumps) == 1 and dumps.texts() == {11: pyspy_dump(GRAD_SYNC, pid=1011)}  # nothing placed by guess
    assert dumps.evidence() == (dumps._by_rank[11].event_id,)
    # A node outside the topology (a spare with the same misconfigured agent) answers for nobody.
    dumps.add_answer(read_stack_answer(unranked_event("spare9", 600, pyspy_dump(GRAD_SYNC, pid=600), 1.2)))
    assert set(dumps.unplaced(TOPO.ranks_by_node)) == {"n005"}


# --- the hang ---------------------------------------------------------------------------------------
def _detector(**hang):
    book = JobBook()
    book.update(TOPO.to_event(JOB, T0))
    return ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig(**hang)))


def _hung_job():
    """Steps every 2 s up to step 20 on every rank, then nothing; every agent keeps beating."""
    events = [step_event(2.0 * n + 0.001 * r, TOPO, r, n) for n in range(1, 21) for r in range(32)]
    events += [beat_event(float(t), node) for t in range(0, 301, 10) for node in TOPO.nodes]
    return events


def _finals(out):
    assert out and out[0].action == "capture_stacks"
    return out[1:]


def test_the_culprit_elsewhere_is_still_evicted_on_placed_stacks_and_the_operator_hears_of_the_node():
    texts = fig7_dumps(TOPO, STUCK)
    placed = read_hang_stacks(texts, TOPO)
    assert placed.localized
    bystander = next(n for n in TOPO.nodes if n not in placed.nodes)
    det = _detector(collect_timeout_s=60.0)
    dumps = node_dumps(texts, (bystander,), 104.0)
    out = run_detector(det, _hung_job() + dumps, until=300)
    (final,) = _finals(out)
    assert final.action == "evict" and final.nodes == placed.nodes and final.ranks == placed.outlier_ranks
    # Every node answered, the bystander with unplaced dumps: nobody waited out the collection.
    assert final.ts == pytest.approx(max(e.ts for e in dumps)) and final.ts - out[0].ts < 60.0
    unranked_ids = {e.id for e in dumps if e.data["rank"] is None}
    assert len(unranked_ids) == 2 and not unranked_ids & set(final.evidence)
    assert f"the agent of {bystander} dumped process(es) whose rank it could not read" in final.detail
    assert "SLURM_PROCID" in final.detail and "fix its --rank-env" in final.detail


def test_when_the_stacks_point_at_the_node_whose_dumps_cannot_be_placed_nobody_is_evicted():
    # The stuck rank's own node cannot rank its processes: the peers' stacks point there, but what
    # its processes do cannot be placed, so the person hears it and nothing is evicted.
    culprit_node = TOPO.by_rank[STUCK].node
    det = _detector(collect_timeout_s=60.0)
    dumps = node_dumps(fig7_dumps(TOPO, STUCK), (culprit_node,), 104.0)
    out = run_detector(det, _hung_job() + dumps, until=300)
    (final,) = _finals(out)
    assert final.action == "alert" and culprit_node in final.nodes
    assert not [d for d in out if d.action in ("evict", "evict_reset_gpu")]
    assert "no eviction" in final.detail and "a stack with no rank is no evidence against any machine" in final.detail
    assert "fix the agent's --rank-env" in final.detail
    # The person is pointed at the node's dumps.
    assert {e.id for e in dumps if e.data["rank"] is None} <= set(final.evidence)
    assert final.ts - out[0].ts < 60.0


def test_a_node_with_unplaced_dumps_is_never_blamed_for_the_dump_it_did_not_send():
    # Every placed stack agrees (grad sync); n005's agent found one process and could not rank it,
    # the other never dumped. Read as silence, rank 10 or 11 would be the suspect: it is not.
    det = _detector(collect_timeout_s=30.0)
    texts = {r: pyspy_dump(GRAD_SYNC, pid=1000 + r) for r in range(32) if r != 11}
    dumps = node_dumps(texts, ("n005",), 104.0)
    out = run_detector(det, _hung_job() + dumps, until=300)
    (final,) = _finals(out)
    assert final.action not in ("evict", "evict_reset_gpu")
    assert "n005" not in final.nodes or final.action == "reattempt"
    # One process short: the collection waited out its 30 s, then the job's next beat (t=140).
    assert final.ts - out[0].ts == pytest.approx(39.0)
    assert "none of its rank(s) [10, 11] is blamed" in final.detail


def test_without_the_unranked_answer_the_same_silence_is_blamed():
    # The control of the test above: the same stall with n005 sending nothing names its ranks.
    det = _detector(collect_timeout_s=30.0)
    texts = {r: pyspy_dump(GRAD_SYNC, pid=1000 + r) for r in range(32) if r not in (10, 11)}
    out = run_detector(det, _hung_job() + node_dumps(texts, (), 104.0), until=300)
    final = _finals(out)[0]  # silence is the weakest evidence: named, and captured again (diagnosis.hang.weak_evidence)
    assert final.action == "alert" and "n005" in final.nodes and "gave no usable dump [10, 11]" in final.detail


def test_an_unranked_answer_before_the_suspicion_is_kept_for_it_but_not_past_progress():
    texts = fig7_dumps(TOPO, STUCK)
    culprit_node = TOPO.by_rank[STUCK].node
    det = _detector()
    early = node_dumps(texts, (culprit_node,), 100.2)
    out = run_detector(det, _hung_job() + early, until=300)
    assert [d.action for d in out] == ["capture_stacks", "alert"]

    # An answer that progress followed belongs to no later stall.
    det = _detector(collect_timeout_s=30.0)
    stale = [e for e in node_dumps(texts, (culprit_node,), 30.5) if e.data["rank"] is None]
    out = run_detector(det, _hung_job() + stale, until=300)
    assert [d.action for d in out][0] == "capture_stacks"
    assert "could not read" not in out[-1].detail


# --- fail-slow rounds ---------------------------------------------------------------------------------
def _rounds_with_unranked(node: str):
    """Five fail-slow stack rounds (tests/diagnosis/test_failslow.py) in which ``node``'s agent
    cannot read its processes' ranks: its two dumps of each round carry a null rank."""
    import random

    from tests.diagnosis.test_failslow import SLOW, _round

    rng = random.Random(4)
    events = []
    for k in range(5):
        for e in _round(102.0 + 10 * k, {SLOW: SLOW_COMPUTE}, request_id=f"req{k}", rng=rng):
            if e.node == node:
                e = Envelope(ts=e.ts, job=e.job, node=e.node, source=e.source, kind=e.kind,
                             data={**e.data, "rank": None, "rank_env": "SLURM_PROCID"}, id=f"u{k}-{e.data['rank']}")
            events.append(e)
    return events


def test_a_fail_slow_round_closes_on_a_nodes_unplaced_dumps_and_never_blames_it():
    from tests.diagnosis.test_failslow import HARDWARE_BACKED, SLOW, _suspicion
    from tests.diagnosis.test_failslow import _detector as failslow_detector

    slow_node = TOPO.by_rank[SLOW].node
    # A bystander's unplaced dumps: the degrader is still found, each round closing on the last answer
    # (evicted: its suspicion stood on a hardware drift, diagnosis.peers.slow_evidence).
    out = run_detector(failslow_detector(), _rounds_with_unranked("n000"), start=95, until=200,
                       diagnoses=[_suspicion(100.0, HARDWARE_BACKED)])
    (final,) = [d for d in out if d.action == "evict"]
    assert final.nodes == (slow_node,) and final.ts < T0 + 145.0
    # The degrader's own node cannot rank its processes: its stacks are never the evidence.
    out = run_detector(failslow_detector(), _rounds_with_unranked(slow_node), start=95, until=200,
                       diagnoses=[_suspicion(100.0)])
    assert not [d for d in out if d.action in ("evict", "evict_reset_gpu")]
