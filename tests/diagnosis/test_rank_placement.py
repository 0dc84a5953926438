"""A rank's machine is judged by the topology in force when its event was sent (rank_mismatch).

The README's `faultlens demo` recorded five record-only `unknown` diagnoses like "rank 430 reported
from n053 but the topology has it on node s001": the evicted machine's ranks acking the evict
command ("exiting with code 75"), stamped the same simulated second as the topology that brought
the standby in, judged at the job's time, which other machines had already moved past the change.
A machine that keeps reporting after its replacement is still recorded: that one is real.
"""

from __future__ import annotations

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.stages import rank_mismatch
from faultlens.events.envelope import Envelope
from faultlens.events.topology import Topology
from tests.diagnosis.diag_events import JOB, T0, ev, nodes, step, topology

SWAP_AT = 30.0  # n002 (ranks 4 and 5) evicted, standby s000 in


def _swapped(ts: float = SWAP_AT) -> Envelope:
    placed = ["s000" if n == "n002" else n for n in nodes(4)]
    return Topology.grid(placed, 2, 2, 2, 2).to_event(JOB, T0 + ts, event_id="topo-swap")


def _ack(ts: float, node: str, rank: int) -> Envelope:
    """What a rank's trainer hook answers an evict command with, as it exits."""
    return ev(
        ts,
        node,
        "train",
        "command_ack",
        rank=rank,
        command_id="c1",
        action="evict",
        obeyed=True,
        reason="exiting with code 75",
        addressed=True,
    )


def _book(job_time: float) -> JobBook:
    book = JobBook()
    book.update(topology(n=4, gpus=2))
    book.update(_swapped())
    book.advance(JOB, T0 + job_time)  # the job's time, moved by the machines read first
    return book


def _detail(book: JobBook, event: Envelope) -> str | None:
    found = rank_mismatch(book, event)
    return None if found is None else found.detail


def test_a_step_sent_before_the_new_topology_is_judged_by_the_one_it_was_sent_under():
    book = _book(job_time=45)
    assert _detail(book, step(25, "n002", 4, 3)) is None
    assert _detail(book, step(40, "s000", 4, 4)) is None


def test_the_evicted_ranks_acking_at_the_instant_of_the_swap_are_not_misplaced():
    book = _book(job_time=45)
    assert [_detail(book, _ack(SWAP_AT, "n002", r)) for r in (4, 5)] == [None, None]
    assert _detail(book, step(SWAP_AT, "s000", 5, 4)) is None  # the standby's first step, that same second


def test_an_evicted_machine_still_reporting_after_its_replacement_is_recorded():
    book = _book(job_time=45)
    found = rank_mismatch(book, step(SWAP_AT + 1, "n002", 4, 4))
    assert found is not None and (found.fault, found.action, found.entity, found.nodes) == (
        "unknown",
        "none",
        "rank-placement",
        ("n002",),
    )
    assert found.detail == "rank 4 reported from n002 but the topology has it on node s000"
    # and a machine claiming a rank before it was placed there, from a machine never in the job
    assert _detail(book, step(SWAP_AT - 1, "s000", 4, 3)) == "rank 4 reported from s000 but the topology has it on node n002"
    assert _detail(book, step(SWAP_AT, "n009", 0, 3)) == "rank 0 reported from n009 but the topology has it on node n000"


def test_only_a_version_stamped_at_that_instant_is_replaced_then():
    book = _book(job_time=45)
    old = book.topology(JOB, T0)
    assert book.replaced_at(JOB, T0 + SWAP_AT) is old
    assert book.replaced_at(JOB, T0) is None  # the first version replaced nothing
    assert book.replaced_at(JOB, T0 + SWAP_AT - 0.001) is None and book.replaced_at(JOB, T0 + 99) is None
    assert book.replaced_at("no-such-job", T0) is None


def test_the_engine_records_nothing_for_the_demo_order_and_the_late_sender_once():
    """Live order, as the demo's one-process engine read it: the standby's steps move the job's time
    past the swap before the evicted machine's last step and its acks are read."""
    e = Engine(EngineConfig(implicit=False))
    out = e.process(topology(n=4, gpus=2))
    for t in (10.0, 20.0):
        out += [d for n, node in enumerate(nodes(4)) for r in (2 * n, 2 * n + 1) for d in e.process(step(t, node, r, int(t)))]
    out += e.process(_swapped())
    out += [
        d
        for n, node in enumerate(["n000", "n001", "s000", "n003"])
        for r in (2 * n, 2 * n + 1)
        for d in e.process(step(40, node, r, 4))
    ]
    out += e.process(step(25, "n002", 4, 3)) + e.process(step(25, "n002", 5, 3))
    out += e.process(_ack(SWAP_AT, "n002", 4)) + e.process(_ack(SWAP_AT, "n002", 5))
    assert [d for d in out if d.fault == "unknown"] == []
    assert e.stats["topology_mismatch"] == 0
    late = e.process(step(45, "n002", 4, 5)) + e.flush()
    assert [(d.fault, d.action, d.nodes, d.detail) for d in late if d.fault == "unknown"] == [
        ("unknown", "none", ("n002",), "rank 4 reported from n002 but the topology has it on node s000")
    ]


def test_the_books_placements_hold_a_job_of_one_topology_only():
    """JobBook.placements (what the node stage looks a step's rank up in, with no call) is the job's
    sole placement while it has one topology, and gone once a second version comes: the steps of a
    swapped job are judged by rank_mismatch at their own time, as above."""
    book = JobBook()
    assert book.placements == {} and book.sole_placement(JOB) is None
    book.update(topology(n=4, gpus=2))
    first = book.topology(JOB)
    assert first is not None and book.placements == {JOB: first.by_rank} and book.sole_placement(JOB) is first.by_rank
    book.update(topology(n=4, gpus=2))  # the same instant again: no second version
    assert book.placements == {JOB: first.by_rank}
    book.update(_swapped())
    assert JOB not in book.placements and book.sole_placement(JOB) is None
    book.advance(JOB, T0 + 45)
    assert _detail(book, step(SWAP_AT + 1, "n002", 4, 4)) == "rank 4 reported from n002 but the topology has it on node s000"
