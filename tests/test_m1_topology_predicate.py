"""One predicate for "the job's topology event" (events/topology.is_topology), used by every module
that picks it out of a stream: the engine's topology book, the remediation consumer, the history's
job-state marks, a recording's topology-first reorder and the ``jobs`` topic's priming count. Each
takes the job's topology, and none takes an event of another source that is also called topology
(a network agent's view of its links, say); a copy of the test beside it is refused."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from faultlens.diagnosis.engine.detector import JobBook
from faultlens.events.envelope import Envelope
from faultlens.events.topology import Topology, is_topology
from faultlens.history.rows import event_marks
from faultlens.remediation.consumer import RemediationHandler
from faultlens.streams.record import topology_first

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGY = Topology.grid(["n0", "n1"], 2, tp=2, pp=1, dp=2)
EPOCH = 1_700_000_000.0


def _job_topology(ts: float = 5.0) -> Envelope:
    return TOPOLOGY.to_event("j", EPOCH + ts)


def _other_topology(ts: float = 5.0) -> Envelope:
    return Envelope(ts=EPOCH + ts, job="j", node="n0", source="net", kind="topology", data=TOPOLOGY.to_data())


def _step(ts: float) -> Envelope:
    return Envelope(ts=EPOCH + ts, job="j", node="n0", source="train", kind="step", data={"rank": 0, "step": 1})


class _Policy:
    """Only what the consumer hands a topology to."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def observe_topology(self, job: str, topology: Topology) -> None:
        self.seen.append(job)


def test_the_predicate():
    assert is_topology(_job_topology())
    assert not is_topology(_other_topology())
    assert not is_topology(_step(1.0))


def test_the_engine_book_takes_only_the_jobs_topology():
    book = JobBook()
    assert book.update(_other_topology()) is None
    assert book.update(_job_topology()) == TOPOLOGY


def test_the_remediation_consumer_takes_only_the_jobs_topology():
    policy = _Policy()
    handler = RemediationHandler(policy)  # type: ignore[arg-type]
    handler.observe_topology(_other_topology())
    assert policy.seen == []
    handler.observe_topology(_job_topology())
    assert policy.seen == ["j"]


def test_the_history_marks_a_start_only_for_the_jobs_topology():
    assert event_marks(_other_topology()) == []
    (mark,) = event_marks(_job_topology())
    assert mark["state"] == "restarting" and mark["reason"] == "job start (topology)"


def test_a_recording_moves_only_the_jobs_topology_first():
    late_other = [_step(1.0), _other_topology(5.0)]
    assert topology_first(late_other) == late_other
    moved = topology_first([_step(1.0), _job_topology(5.0)])
    assert is_topology(moved[0]) and moved[0].ts == EPOCH + 1.0


def _compares_job_topology(node: ast.AST) -> bool:
    """``x.source == "job"`` (or ``!=``) and ``x.kind == "topology"`` in one boolean expression."""
    if not isinstance(node, ast.BoolOp):
        return False
    said = {
        (c.left.attr, c.comparators[0].value)
        for c in node.values
        if isinstance(c, ast.Compare)
        and isinstance(c.left, ast.Attribute)
        and len(c.comparators) == 1
        and isinstance(c.comparators[0], ast.Constant)
    }
    return {("source", "job"), ("kind", "topology")} <= said


def test_no_module_but_events_topology_spells_the_predicate_out():
    home = ROOT / "events" / "topology.py"
    paths = [
        Path(folder, name)
        for folder, _, names in os.walk(ROOT / "faultlens", followlinks=True)  # the folders are linked in
        for name in names
        if name.endswith(".py")
    ]
    copies = [
        str(path.relative_to(ROOT / "faultlens"))
        for path in paths
        if path.resolve() != home
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if _compares_job_topology(node)
    ]
    assert len(paths) > 300  # the walk went through the linked folders
    assert copies == [], f"use events/topology.is_topology in {copies}"
