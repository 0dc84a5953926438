"""A member between a revocation and its next assignment (kafka-python keeps the revoked partitions
in its assignment, and the loop running, until the join completes): what it commits there must
stay below the records it held and let go of. Kafka-free: a consumer stand-in records commits."""

from __future__ import annotations

import time

import pytest
from kafka.structs import TopicPartition

from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner.loop import GroupRunner
from faultlens.streams.runner.types import Record

TP = TopicPartition("t", 0)


class _MidJoinConsumer:
    """kafka-python's view mid-join: the old assignment, a position past everything read."""

    def __init__(self, position: int):
        self._position = position
        self.commits: list[dict] = []

    def assignment(self):
        return {TP}

    def position(self, tp):
        return self._position

    def commit(self, offsets):
        self.commits.append({tp: o.offset for tp, o in offsets.items()})


class _NoProducer:
    def send_all(self, out):
        return 0

    def flush(self, timeout=None):
        pass


def _runner() -> GroupRunner:
    return GroupRunner(KafkaSettings(bootstrap="unused:9092"), "g", ["t"], lambda records: [],
                       producer=_NoProducer(), event_time=True)


def _hold(runner: GroupRunner, offsets: range) -> None:
    """Read ``offsets`` of TP: the merge holds them (no word yet from a partition that may speak)."""
    now = time.time()
    runner.merge.assign([TP, TopicPartition("t", 1)], wall_now=now)
    for o in offsets:
        record = Record(topic="t", partition=0, offset=o, key=b"n0", value=None, timestamp_ms=0,
                        event_ts=100.0 + o)
        runner.merge.add(TP, o, record.event_ts, record, wall_now=now)
    runner.rebalance.next_offset[TP] = offsets.stop


def test_a_member_stopping_mid_rebalance_commits_where_its_handing_on_stopped():
    runner = _runner()
    _hold(runner, range(10, 13))
    runner._revoked([TP])  # the merge lets go of 10..12 for the next owner
    consumer = _MidJoinConsumer(position=13)
    runner._commit_handed_on(consumer, consumer.assignment())
    assert consumer.commits == [{TP: 10}]


def test_a_partition_revoked_before_anything_of_it_was_handed_on_is_not_committed():
    runner = _runner()
    runner.rebalance.to_rebuild.add(TP)  # assigned, not yet read from where its rebuild starts
    runner.merge.assign([TP], wall_now=0.0)
    runner._revoked([TP])
    consumer = _MidJoinConsumer(position=500)
    runner._commit_handed_on(consumer, consumer.assignment())
    assert consumer.commits == []


class _JoiningConsumer(_MidJoinConsumer):
    """Assigned, then revoked, then joining for ``join_s`` (each poll returns nothing, as
    kafka-python's does when the join outlasts its timeout), then assigned again."""

    def __init__(self, runner: GroupRunner, join_s: float):
        super().__init__(position=13)
        self.runner, self.join_s = runner, join_s
        self.polls = 0
        self.joined_again = False
        self._join_ends: float | None = None

    def poll(self, timeout_ms):
        self.polls += 1
        if self.polls == 1:
            self.runner._assigned([TP])
        elif self.polls == 2:
            self.runner.commits.unsettled = True  # read since the last commit, as a busy member has
            self.runner._revoked([TP])
            self._join_ends = time.monotonic() + self.join_s
        elif not self.joined_again and time.monotonic() >= self._join_ends:
            self.runner._assigned([TP])
            self.joined_again = True
        time.sleep(0.02)
        return {}

    def pause(self, *tps):
        pass

    def resume(self, *tps):
        pass

    def highwater(self, tp):
        return self._position  # read to the end

    def committed(self, tp):
        return None

    def seek(self, tp, offset):
        self._position = offset

    def close(self, autocommit=False):
        pass


def test_a_member_does_not_stop_for_idleness_in_the_middle_of_a_rebalance():
    """A join longer than ``idle_stop_s`` is not idleness: a member stopping there left the records
    it had let go of to a next owner that, in a group emptying at the end of a run, never came."""
    runner = _runner()
    consumer = _JoiningConsumer(runner, join_s=0.6)
    runner._consumer = lambda: consumer
    runner.run(idle_stop_s=0.2, handle_signals=False)
    assert consumer.joined_again


class _StuckMember(_JoiningConsumer):
    """A member whose join never completes; the broker says the group committed ``group_committed``
    of the partition's 13 records."""

    def __init__(self, runner: GroupRunner, group_committed: int | None = None, fresh: bool = False):
        super().__init__(runner, join_s=float("inf"))
        self.group_committed = group_committed
        self.closed = False
        if fresh:
            self.polls, self._join_ends = 2, float("inf")  # joining from its first poll, never assigned

    def partitions_for_topic(self, topic):
        return {0}

    def end_offsets(self, partitions):
        return {tp: 13 for tp in partitions}

    def committed(self, tp, timeout_ms=None):
        return self.group_committed

    def close(self, autocommit=False):
        self.closed = True


class _FreshMember(_StuckMember):
    """A fresh member whose join completes at its first poll."""

    def poll(self, timeout_ms):
        self.polls += 1
        if self.polls == 1:
            self.runner._assigned([TP])
            self.joined_again = True
        time.sleep(0.02)
        return {}


def test_a_stuck_join_with_input_left_joins_again_and_finishes(monkeypatch):
    """A member whose join does not complete (kicked while stopped; Tansu left its join mid-way)
    while its group's commits are behind the end of its input does not stop with partitions unread:
    it joins again as a fresh member, is assigned, and ends its run from there (session 25)."""
    import faultlens.streams.runner.loop as runner_module

    monkeypatch.setattr(runner_module, "REBALANCE_IDLE_GRACE_S", 0.3)
    runner = _runner()
    stuck = _StuckMember(runner, group_committed=5)
    fresh = _FreshMember(runner, group_committed=5)
    runner._consumer = lambda: stuck
    runner._group_consumer = lambda: fresh
    runner.run(idle_stop_s=0.2, handle_signals=False)
    assert stuck.closed and not stuck.joined_again
    assert fresh.joined_again  # it read on as the partition's owner, then idle-stopped
    assert runner.rebalance.assignments == 2 and runner.rebalance.rebalancing is None


def test_a_stuck_join_stops_when_the_group_committed_its_input_to_the_end(monkeypatch):
    """Nothing left to read (the others committed the input to its end): no rejoin, the run ends."""
    import faultlens.streams.runner.loop as runner_module

    monkeypatch.setattr(runner_module, "REBALANCE_IDLE_GRACE_S", 0.3)
    runner = _runner()
    stuck = _StuckMember(runner, group_committed=13)
    runner._consumer = lambda: stuck
    runner._group_consumer = lambda: pytest.fail("joined again with nothing left to read")
    _hold(runner, range(10, 13))
    runner.run(idle_stop_s=0.2, handle_signals=False)
    assert not stuck.joined_again
    assert stuck.commits[-1] == {TP: 10}  # where its handing on stopped (a broker refuses it past a new generation)


def test_a_join_that_never_completes_still_ends_a_bounded_run(monkeypatch):
    """Joins that never complete, fresh member after fresh member, end a bounded run after
    MAX_REJOINS: the member stops, committing where its handing on stopped."""
    import faultlens.streams.runner.loop as runner_module

    monkeypatch.setattr(runner_module, "REBALANCE_IDLE_GRACE_S", 0.3)
    monkeypatch.setattr(runner_module, "MAX_REJOINS", 2)
    runner = _runner()
    stuck = _StuckMember(runner)
    fresh: list[_StuckMember] = []
    runner._consumer = lambda: stuck
    runner._group_consumer = lambda: fresh.append(_StuckMember(runner, fresh=True)) or fresh[-1]
    _hold(runner, range(10, 13))
    runner.run(idle_stop_s=0.2, handle_signals=False)
    assert not stuck.joined_again and stuck.closed
    assert len(fresh) == 2 and fresh[0].closed and not any(f.joined_again for f in fresh)
    assert stuck.commits[-1] == {TP: 10}


def test_a_member_between_revocation_and_assignment_says_nothing_downstream():
    """Revoked and not yet given partitions again, a member's merge is empty, so "idle", while the
    client still lists its old assignment as what it reads: said downstream, that word let the
    job stage take the other member's records for all there was, 220 s of event time past this
    one's, and a node of this member's was evicted as silent (issue 32, starved on CI). Silent
    until its next assignment, its last word before the rebalance binds; then it says hello."""
    words: list[tuple] = []
    runner = GroupRunner(KafkaSettings(bootstrap="unused:9092"), "g", ["t"], lambda records: [],
                         producer=_NoProducer(), event_time=True,
                         on_progress=lambda *word: words.append(word) or [])
    now = time.time()
    runner._assigned([TP])
    runner.progress.settle_until = 0.0
    runner.merge.add(TP, 0, 100.0, None, wall_now=now)
    runner.merge.release(now + 0.5, {TP: True})
    runner._announce()
    assert words[-1][0] == 100.0 and words[-1][3] is False  # progress, busy
    runner._revoked([TP])
    runner.progress.settle_until = 0.0  # a join that outlasts the settling time (8 s on a starved host)
    runner.merge.release(now + 20, {TP: True})
    assert runner.merge.idle  # what it would have said
    said = len(words)
    runner.progress.announced_wall = 0.0  # a second and more since its last word
    runner._announce()
    assert words[said:] == []
    runner._assigned([TP])
    runner._announce()
    assert words[said][0] == float("-inf")  # the hello: its earlier words no longer hold


class _TakeoverConsumer(_MidJoinConsumer):
    """A partition taken over: the group committed ``committed``; retained input starts at 0."""

    def __init__(self, committed: int):
        super().__init__(position=committed)
        self._committed = committed

    def committed(self, tp):
        return self._committed

    def offsets_for_times(self, times):
        from kafka.structs import OffsetAndTimestamp

        return {tp: OffsetAndTimestamp(0, 0, None) for tp in times}

    def beginning_offsets(self, parts):
        return {tp: 0 for tp in parts}

    def seek(self, tp, offset):
        self._position = offset


def test_a_partition_taken_over_is_not_committed_below_the_groups_commit_while_it_is_read_again():
    """Its re-read for the handler's state starts ``rebuild_s`` before the group's commit: committing
    that start moved the commit back (a takeover's 273 to 0 for the seconds the re-read took, seen
    with two members on Tansu), and a restart then would read all of it again."""
    runner = GroupRunner(KafkaSettings(bootstrap="unused:9092"), "g", ["t"], lambda records: [],
                         producer=_NoProducer(), event_time=True, rebuild_s=900.0)
    consumer = _TakeoverConsumer(committed=273)
    runner._assigned([TP])
    runner.rebalance.seek(consumer)
    assert consumer.position(TP) == 0
    _hold(runner, range(0, 3))  # read again, held
    runner._commit_handed_on(consumer, consumer.assignment())
    assert consumer.commits == []  # the group's 273 stands
    runner.merge.drain()
    consumer.seek(TP, 300)  # handed on past the group's commit
    runner._commit_handed_on(consumer, consumer.assignment())
    assert consumer.commits == [{TP: 300}]
    assert runner.rebalance.commit_floor == {}
