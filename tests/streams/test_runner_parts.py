"""The runner's parts alone (streams/runner/options.py, runner_handler.py, runner_commit.py,
runner_rebalance.py): Kafka-free, each with its own state."""

from __future__ import annotations

import threading

import pytest
from kafka.structs import OffsetAndMetadata, TopicPartition

from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner.commit import CommitSchedule
from faultlens.streams.runner.handler import HandlerParts
from faultlens.streams.runner.loop import GroupRunner
from faultlens.streams.runner.options import RunnerOptions
from faultlens.streams.runner.rebalance import RebalanceBook, RebalanceQueue

A, B, C = (TopicPartition("t", p) for p in range(3))


# --- options ---------------------------------------------------------------------------------
def test_keyword_arguments_override_the_options_and_an_unknown_one_is_named():
    base = RunnerOptions(event_time=True, max_idle_s=5.0)
    got = RunnerOptions.of(base, rebuild_s=900.0, broadcast_topics=["jobs"], deferred_topics={"telemetry.gpu": 1})
    assert (got.event_time, got.max_idle_s, got.rebuild_s) == (True, 5.0, 900.0)
    assert got.broadcast_topics == ("jobs",) and got.deferred_topics == ("telemetry.gpu",)
    with pytest.raises(TypeError, match="event_tme"):
        RunnerOptions.of(None, event_tme=True)


def test_a_runner_built_with_keywords_holds_them_as_its_options():
    runner = GroupRunner(KafkaSettings(bootstrap="unused:9092"), "g", ["t"], lambda records: [],
                         producer=object(), event_time=True, max_records=10)
    assert runner.options == RunnerOptions(event_time=True, max_records=10)
    assert runner.merge is not None and runner.order is not None
    plain = GroupRunner(KafkaSettings(bootstrap="unused:9092"), "g", ["t"], lambda records: [], producer=object())
    assert plain.merge is None and plain.order is None


# --- what a handler takes --------------------------------------------------------------------
class _Plain:
    def handle(self, records):
        return []


class _Clocked(_Plain):
    def tick(self, now):
        return []

    def partitions_moved(self, partitions):
        pass


class _HeldAware(_Clocked):
    def tick_held(self, now, busy, upstream):
        return []

    def on_assigned(self, partitions):
        pass


def test_a_handler_is_taken_for_what_its_methods_declare():
    def fn(records):
        return []

    assert HandlerParts.of(fn) == HandlerParts(handle=fn)
    plain = HandlerParts.of(_Plain())
    assert not plain.ticks and plain.on_assigned is None and plain.on_moved is None
    clocked = HandlerParts.of(_Clocked())
    assert clocked.ticks and clocked.tick_held is None and clocked.on_moved is not None
    held = HandlerParts.of(_HeldAware())
    assert held.tick_held is not None and held.on_assigned is not None


# --- commit schedule -------------------------------------------------------------------------
def test_a_reading_member_settles_once_an_interval_and_a_caught_up_one_at_once():
    s = CommitSchedule(0.5, now=10.0)
    assert not s.sent(True, 10.2)  # reading, within the interval: only send
    assert s.unsettled
    assert s.sent(True, 10.6)  # the interval is up
    assert s.settled(10.6) and not s.unsettled
    assert not s.settled(10.7)  # nothing handed on since
    assert s.sent(False, 10.8)  # nothing read: caught up, settle now
    s.sent(True, 10.9)
    s.failed()
    assert not s.unsettled  # re-read from the last commit: nothing left to commit


def test_records_handed_on_after_their_read_was_settled_are_settled_again():
    """Event time: the merge lets go of records in a loop that reads nothing, or at the end of a
    run; settled only as reads, they were never committed (streams/runner/commit.py)."""
    s = CommitSchedule(0.5, now=10.0)
    assert s.sent(True, 10.6) and s.settled(10.6)  # read, held by the merge, settled below them
    s.handed_on()  # let go later, nothing read
    assert s.unsettled  # the loop settles (commits) now, as a caught-up member does
    assert s.sent(False, 10.7) and s.settled(10.7)
    assert not s.unsettled


# --- rebalance bookkeeping -------------------------------------------------------------------
def test_a_partition_given_straight_back_resumes_where_its_handing_on_stopped():
    book = RebalanceBook(rebuild_s=900.0)
    assert book.assigned([A, B]) == {A, B}  # both came from elsewhere: rebuilt
    assert book.to_rebuild == {A, B} and book.assignments == 1
    book.to_rebuild.clear()  # sought
    book.next_offset.update({A: 40, B: 7})
    held = {A: 31}  # A has records held from 31; B has none
    book.revoked([A, B], now=5.0, held_offset=held.get)
    assert book.rebalancing == 5.0 and book.resume_at == {A: 31, B: 7}
    moved = book.assigned([A, C])  # A back, B gone, C new
    assert moved == {B, C}
    assert book.to_resume == {A: 31} and book.to_rebuild == {C}
    assert book.rebalancing is None and book.resume_at == {}
    assert book.pending(A) and book.pending(C) and not book.pending(B)


def test_a_partition_revoked_before_its_rebuild_read_anything_is_rebuilt_again():
    book = RebalanceBook(rebuild_s=900.0)
    book.assigned([A])
    book.revoked([A], now=1.0, held_offset=lambda tp: None)
    assert book.resume_at == {} and book.to_rebuild == set()
    assert book.assigned([A]) == {A} and book.to_rebuild == {A}


def test_without_event_time_no_resume_point_is_kept():
    book = RebalanceBook(rebuild_s=0.0)
    book.assigned([A])
    book.next_offset[A] = 12
    book.revoked([A], now=1.0, held_offset=None)
    assert book.resume_at == {} and book.assigned([A]) == {A} and book.to_rebuild == set()


class _Target:
    def __init__(self):
        self.rebalances = RebalanceQueue()
        self.calls: list[tuple[str, list]] = []

    def _assigned(self, partitions):
        self.calls.append(("assigned", list(partitions)))

    def _revoked(self, partitions):
        self.calls.append(("revoked", list(partitions)))


def test_callbacks_from_another_thread_wait_for_the_loop():
    target = _Target()
    queue = target.rebalances
    queue.event(True, [A], target)  # no loop yet: applied at once
    assert target.calls == [("assigned", [A])]
    queue.loop_thread = threading.get_ident()
    other = threading.Thread(target=lambda: (queue.event(False, [A], target), queue.event(True, [B], target)))
    other.start()
    other.join()
    assert target.calls == [("assigned", [A])]  # queued, not applied beside the loop
    assert queue.apply(target)
    assert target.calls[1:] == [("revoked", [A]), ("assigned", [B])]
    assert not queue.apply(target)


def test_a_commit_floor_holds_until_reached_and_only_for_a_partition_kept():
    book = RebalanceBook(rebuild_s=900.0)
    book.commit_floor.update({A: 273, B: 40})  # both read again from before the group's commit
    assert book.above_floor({A: OffsetAndMetadata(5, "", -1), B: OffsetAndMetadata(40, "", -1)}) == {
        B: OffsetAndMetadata(40, "", -1)}
    assert book.commit_floor == {A: 273}  # B's was reached
    book.next_offset[A] = 9
    book.revoked([A], now=1.0, held_offset=lambda tp: None)
    book.assigned([A])  # given straight back: it resumes at 9, still below the group's 273
    assert book.commit_floor == {A: 273}
    book.revoked([A], now=2.0, held_offset=lambda tp: None)
    book.assigned([C])  # gone: its next owner's business
    assert book.commit_floor == {}
