"""Live and backlog give the same silence diagnoses: the order a live member hands events on in.

A live member judges silence on the event-time order its merge hands records on in
(streams/runner/event_time.py). A partition caught up with its last fetch and silent for
``max_idle_s`` stops holding the others back; a member whose loop was away (starved of CPU, or
stopped) came back to find every partition "silent" that long, caught up by high-water marks as old
as its fetches before the gap. The partitions whose records the next poll brought first were handed
on past the others' records: with a replay at 60x, one such gap is minutes of event time, and one
job's steps went on while its heartbeats waited (outside-quiet-neighbour: a `node_silent` alert
live that `analyze` never gives). Here a loop gap of 3 s in a 60x stream, with the fetches as
kafka-python answers them after it (the train partition's first, the heartbeat partition's a poll
later), through the runner's order and the engine, against the engine on the same events in
event-time order (what `faultlens analyze` reads).
"""

from __future__ import annotations

import pytest
from kafka.structs import TopicPartition

from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.offline import analyze
from faultlens.streams.config import KafkaSettings
from faultlens.streams.runner import event_time as runner_time
from faultlens.streams.runner.loop import GroupRunner
from faultlens.streams.runner.types import Record
from tests.diagnosis.diag_events import T0, beat, nodes, step, topology

HB, TRAIN = TopicPartition("telemetry.heartbeat", 0), TopicPartition("telemetry.train", 0)
SPEED = 60.0  # event seconds a wall second: the outside live test's pace where it failed
LOOP_S = 0.2  # one loop's wall time (its poll's timeout)
NODES = nodes(4)


class _Clock:
    """The runner's wall and monotonic clocks, moved by the test."""

    def __init__(self) -> None:
        self.wall = 2_000_000_000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.wall


class _Fetching:
    """The group consumer as the order sees it: each partition's position, and the high-water
    mark its last fetch carried (kafka-python's ``highwater``)."""

    def __init__(self) -> None:
        self.pos = {HB: 0, TRAIN: 0}
        self.hwm = {HB: 0, TRAIN: 0}

    def assignment(self) -> set[TopicPartition]:
        return set(self.pos)

    def highwater(self, tp: TopicPartition) -> int:
        return self.hwm[tp]

    def position(self, tp: TopicPartition) -> int:
        return self.pos[tp]

    def pause(self, *tps: TopicPartition) -> None:
        pass

    def resume(self, *tps: TopicPartition) -> None:
        pass


def _stream(until: float) -> list:
    """A 4-node job (one rank a node): beats every 5 s, steps every 2 s, in event-time order."""
    events = [topology(4, gpus=1, tp=1, pp=1)]
    t, n = 1.0, 0
    while t < until:
        for i, node in enumerate(NODES):
            if round(t * 10) % 50 == 10:
                events.append(beat(t + 0.1 * i, node, seq=n))
            if round(t * 10) % 20 == 0:
                events.append(step(t + 0.01 * i, node, i, int(t // 2)))
        t = round(t + 0.5, 1)
    return sorted(events, key=lambda e: e.ts)


def _live(events: list, gap_at: float, gap_s: float, monkeypatch: pytest.MonkeyPatch) -> tuple[list, GroupRunner, int]:
    """The runner's order over ``events`` replayed at SPEED: every loop fetches what was sent by
    then, except that the loop at event time ``gap_at`` is away ``gap_s`` wall seconds, and the
    first poll after it brings the train partition's records alone (the heartbeat partition's fetch
    answers with the next one). Returns what the order handed on, in its order, the runner, and
    how many records only the drain at the end handed on."""
    clock = _Clock()
    monkeypatch.setattr(runner_time, "time", clock)
    runner = GroupRunner(
        KafkaSettings(bootstrap="127.0.0.1:1"),
        "g",
        ["telemetry.heartbeat", "telemetry.train"],
        lambda recs: [],
        event_time=True,
        producer=object(),
    )
    order, consumer = runner.order, _Fetching()
    assert order is not None
    order.assigned([HB, TRAIN])
    start, sent, handed = clock.wall, 0, []
    waiting: dict[TopicPartition, list[Record]] = {HB: [], TRAIN: []}
    # The topology comes from the `jobs` broadcast before any telemetry: handed to the engine first.
    head, body = events[0], events[1:]
    away_done = False
    while sent < len(body) or any(waiting.values()):
        clock.wall += LOOP_S
        if not away_done and (clock.wall - start) * SPEED >= gap_at:
            clock.wall += gap_s
            away_done = True
            fetch_now = {TRAIN}
        else:
            fetch_now = {HB, TRAIN}
        now_event = T0 + (clock.wall - start) * SPEED
        while sent < len(body) and body[sent].ts <= now_event:
            e = body[sent]
            tp = HB if e.source == "heartbeat" else TRAIN
            waiting[tp].append(
                Record(tp.topic, tp.partition, consumer.pos[tp] + len(waiting[tp]), None, e, int(e.ts * 1000), event_ts=e.ts)
            )
            sent += 1
        polled = []
        for tp in (TRAIN, HB):
            if tp in fetch_now:
                polled += waiting[tp]
                consumer.pos[tp] += len(waiting[tp])
                consumer.hwm[tp] = consumer.pos[tp]
                waiting[tp] = []
        handed += order.ordered(consumer, polled)
    drained = order.ordered(consumer, [], drain=True)
    return [head, *(r.value for r in handed + drained)], runner, len(drained)


def _silence(diagnoses) -> list[tuple]:
    return sorted((d.fault, d.action, d.nodes) for d in diagnoses if d.fault in ("node_silent", "telemetry_lost"))


def _engine_over(events: list) -> list:
    engine, out = Engine(), []
    for e in events:
        out += engine.process(e)
    return out + engine.release()


def test_the_stream_judged_in_event_time_order_names_no_silence():
    # The reference: every node beats and steps to the end (analyze's order).
    events = _stream(600)
    assert _silence(analyze(iter(events))) == []


def test_a_loop_away_hands_nothing_on_past_a_partition_it_did_not_fetch_meanwhile(monkeypatch):
    events = _stream(600)
    live, runner, _ = _live(events, gap_at=300, gap_s=3.0, monkeypatch=monkeypatch)
    assert sorted(e.id for e in live) == sorted(e.id for e in events)
    # Before: the steps of the 180 s the loop was away handed on ahead of the beats (152 records
    # late), and "4 of the job's 4 nodes stopped beating together", an alert analyze never gives.
    assert _silence(_engine_over(live)) == _silence(analyze(iter(events))) == []
    assert runner.stats.late_released == 0
    assert [e.ts for e in live[1:]] == sorted(e.ts for e in live[1:])


def test_a_loop_of_ordinary_length_still_passes_a_quiet_partition_over(monkeypatch):
    # The guard counts a loop's time up to QUIET_PER_LOOP_S: a member keeping pace is not held up.
    # Only the train partition carries records; the heartbeat partition, caught up and silent,
    # stops holding it back after max_idle_s of loops.
    events = [e for e in _stream(600) if e.source != "heartbeat"]
    live, runner, drained = _live(events, gap_at=10_000, gap_s=0.0, monkeypatch=monkeypatch)
    assert len(live) == len(events)
    assert drained == 0 and runner.stats.late_released == 0
