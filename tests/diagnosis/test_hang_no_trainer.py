"""A node whose agent finds no training process answers a capture with a null rank: the diagnosis
reads it as that node's answer (diagnosis.stacks.dump_set.NoTrainerAnswer), stops waiting for its ranks
and names the node for stop-time checks without evicting anyone."""

from __future__ import annotations

import time

import pytest

from bench.testbed.stack_samples import (
    GRAD_SYNC,
    JOB,
    PP_SEND,
    T0,
    beat_event,
    event,
    grid,
    pyspy_dump,
    run_detector,
    stack_event,
    step_event,
)
from faultlens.collectors.command_listener import StackCaptureSource
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
from faultlens.diagnosis.hang.detector import HangConfig
from faultlens.diagnosis.stacks.dump_set import DumpSet, NoTrainerAnswer, read_stack_answer, read_stack_dump
from faultlens.events.command import Command
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.signing import SigningKey
from faultlens.streams.config import KafkaSettings

KEY = SigningKey.generate()
TOPO = grid(16, 2, tp=2, pp=4, dp=4)
GONE = "n003"  # ranks 6 and 7: the last pipeline stage of dp:0
PATTERN = "no-such-trainer-[0-9]{40}"


def agent_answer(node: str, at: float, job: str = JOB) -> Envelope:
    """What the real node agent publishes when it finds no training process, moved to event time ``at``."""
    out: list[Envelope] = []
    agent = StackCaptureSource(KafkaSettings(bootstrap="127.0.0.1:1"), keys=KEY.verify_keys(), job=job, node=node,
                               publish=out.append, proc_pattern=PATTERN)
    now = time.time()
    cmd = Command(job=job, action="capture_stacks", issued_at=now, expires_at=now + 60).signed(KEY)
    (real,) = agent.handle(cmd.encode())
    assert out == [real]
    return Envelope(ts=T0 + at, job=real.job, node=real.node, source=real.source, kind=real.kind,
                    data=dict(real.data), id=real.id)


# --- reading the answer ---------------------------------------------------------------------------
def test_the_agents_no_trainer_answer_is_read_as_the_nodes_answer():
    answer = agent_answer(GONE, 100.0)
    assert answer.data["rank"] is None and answer.data["pid"] is None and answer.data["ok"] is False
    read = read_stack_answer(answer)
    assert isinstance(read, NoTrainerAnswer)
    assert read.node == GONE and read.event_id == answer.id and read.ts == answer.ts
    assert "no training processes found on this node" in read.reason and PATTERN in read.reason
    assert read.request_id == answer.data["request_id"]
    # The per-rank reader still refuses it: a rank is what its callers need.
    with pytest.raises(InvalidEvent, match="data.rank"):
        read_stack_dump(answer)


def test_other_bad_payloads_stay_dead_letters_with_their_reason():
    def dump(**data):
        return event(1.0, "n000", "stack", "stack_dump", tool="py-spy", **data)

    # A null rank with a pid is a process whose rank the agent could not read (test_hang_unranked);
    # with a pid that is no process id it stays a dead letter.
    with pytest.raises(InvalidEvent, match="data.pid"):
        read_stack_answer(dump(rank=None, pid="4242", dump=pyspy_dump(GRAD_SYNC), ok=True))
    with pytest.raises(InvalidEvent, match="data.dump"):
        read_stack_answer(dump(rank=None, pid=4242, ok=True))
    with pytest.raises(InvalidEvent, match="must say ok: false"):
        read_stack_answer(dump(rank=None, pid=None, dump="no training processes found on this node"))
    with pytest.raises(InvalidEvent, match="data.dump"):
        read_stack_answer(dump(rank=None, pid=None, ok=False))
    with pytest.raises(InvalidEvent, match="data.rank: Expected `int | null`, got `str`"):
        read_stack_answer(dump(rank="seven", pid=1, dump="x"))
    with pytest.raises(InvalidEvent, match="data.rank"):
        read_stack_answer(dump(pid=1, dump="x"))  # no rank key at all
    assert read_stack_answer(dump(rank=3, pid=1, dump="x")).rank == 3


def test_a_dump_set_counts_a_node_without_trainer_as_answered_for_its_ranks():
    dumps = DumpSet()
    answer = read_stack_answer(agent_answer(GONE, 100.0))
    assert dumps.add_no_trainer(answer) and not dumps.add_no_trainer(answer)
    dumps.add(read_stack_dump(stack_event(100.5, TOPO, 0, pyspy_dump(GRAD_SYNC))))
    assert dumps.answered(TOPO.ranks_by_node) == {0, 6, 7}
    assert dumps.gone(TOPO.ranks_by_node) == {GONE: (6, 7)}
    assert len(dumps) == 1 and dumps.ranks() == {0}  # no dump was invented for the gone ranks
    # A node outside the topology (a spare) says nothing about this job's ranks.
    dumps.add_no_trainer(read_stack_answer(agent_answer("spare9", 101.0)))
    assert dumps.gone(TOPO.ranks_by_node) == {GONE: (6, 7)}


# --- the hang -------------------------------------------------------------------------------------
def _detector(**hang):
    book = JobBook()
    book.update(TOPO.to_event(JOB, T0))
    return ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig(**hang)))


def _hung_job(gone_nodes=()):
    """Steps every 2 s up to step 20 on every rank, then nothing; every agent keeps beating, those of
    ``gone_nodes`` with no training pid from t=50 on (their trainer died in step 21)."""
    events = [step_event(2.0 * n + 0.001 * r, TOPO, r, n) for n in range(1, 21) for r in range(32)]
    events += [beat_event(float(t), node, pids=[] if node in gone_nodes and t >= 50 else None)
               for t in range(0, 301, 10) for node in TOPO.nodes]
    return events


def _survivor_dumps(gone_nodes, at: float):
    """py-spy dumps of every rank not on ``gone_nodes``: the earlier stages of the gone ranks'
    pipelines block sending forward to them, every other rank waits in the DP gradient sync."""
    gone = {r for n in gone_nodes for r in TOPO.ranks_by_node[n]}
    lost = {(TOPO.by_rank[r].tp, TOPO.by_rank[r].dp) for r in gone}
    out = []
    for p in TOPO.ranks:
        if p.rank in gone:
            continue
        frames = PP_SEND if (p.tp, p.dp) in lost else GRAD_SYNC
        out.append(stack_event(at + 0.01 * p.rank, TOPO, p.rank, pyspy_dump(frames, pid=1000 + p.rank)))
    return out


def _idle_windows_of(det, node, times):
    from faultlens.diagnosis.peers.features import NodeWindow

    out = []
    for ts in times:
        for n in TOPO.nodes:
            idle = n == node
            out += det.observe_window(NodeWindow(JOB, n, T0 + ts, {"util_min": 0.0 if idle else 100.0,
                                                                    "util": 0.0 if idle else 100.0,
                                                                    "power_ratio": 0.1 if idle else 0.35}, 10))
    return out


def test_a_node_without_trainer_is_named_for_checks_and_nobody_is_evicted():
    det = _detector(collect_timeout_s=60.0)
    answer = agent_answer(GONE, 104.0)
    events = _hung_job([GONE]) + [answer] + _survivor_dumps([GONE], 105.0)
    first_empty_beat = next(e for e in events if e.node == GONE and e.kind == "beat" and e.data["pids"] == [])
    out = run_detector(det, [e for e in events if e.ts <= T0 + 85], until=85)
    out += _idle_windows_of(det, GONE, (60.0, 70.0, 80.0))  # its GPUs idle: no trainer runs there
    out += run_detector(det, [e for e in events if e.ts > T0 + 85], start=86, until=300)
    out += _idle_windows_of(det, GONE, (150.0, 160.0))  # later GPU evidence revisits nothing
    assert [d.action for d in out] == ["capture_stacks", "stop_time_diagnosis"]
    assert not [d for d in out if d.action in ("evict", "evict_reset_gpu")]
    suspicion, final = out
    assert final.fault == "job_hang" and final.nodes == (GONE,) and final.ranks == (6, 7)
    # Decided on the last answer: nobody waited out the collection for ranks 6 and 7.
    assert final.ts == pytest.approx(T0 + 105.0 + 0.01 * 31) and final.ts - suspicion.ts < 60.0
    assert "no training processes found on this node" in final.detail and PATTERN in final.detail
    assert "evict only one that fails them" in final.detail
    # Corroborated by the node's own heartbeats and by the survivors' wait chains, still no eviction.
    assert "list no training process since" in final.detail and "wait chains end at gone rank(s) [6, 7]" in final.detail
    assert answer.id in final.evidence and first_empty_beat.id in final.evidence
    assert 0.5 <= final.confidence <= 0.9


def test_a_node_without_trainer_answers_before_the_suspicion_too():
    det = _detector()
    events = _hung_job() + [agent_answer(GONE, 100.2)] + _survivor_dumps([GONE], 100.3)
    out = run_detector(det, events, until=300)
    assert [d.action for d in out] == ["capture_stacks", "stop_time_diagnosis"]
    assert out[1].nodes == (GONE,)


def test_without_other_stacks_the_node_without_trainer_is_still_named_not_evicted():
    det = _detector(collect_timeout_s=30.0)
    out = run_detector(det, _hung_job([GONE]) + [agent_answer(GONE, 104.0)], until=300)
    assert [d.action for d in out] == ["capture_stacks", "stop_time_diagnosis"]
    final = out[1]
    assert final.nodes == (GONE,) and "no other rank sent a usable stack" in final.detail
    # The other ranks were waited for: the 30 s timeout, then the job's next beat (t=140).
    assert final.ts - out[0].ts == pytest.approx(39.0)


def test_most_nodes_without_trainer_single_nobody_out():
    # Every agent but two finds nothing: its pattern misses the trainer, or the job exited; no machine is named.
    det = _detector(collect_timeout_s=30.0)
    gone = TOPO.nodes[:14]
    events = _hung_job(gone) + [agent_answer(n, 104.0 + 0.01 * i) for i, n in enumerate(gone)]
    events += _survivor_dumps(gone, 105.0)
    out = run_detector(det, events, until=300)
    finals = [d for d in out if d.action != "capture_stacks"]
    assert len(finals) == 1 and finals[0].action not in ("evict", "evict_reset_gpu", "stop_time_diagnosis")
    assert not set(finals[0].nodes) & set(gone) or finals[0].action == "reattempt"
    assert "too many to single one out" in finals[0].detail
    # Every rank answered (14 nodes for theirs, the rest with dumps): decided without the timeout.
    assert finals[0].ts - out[0].ts < 30.0
