"""The intake places each record where the event clock says (streams.intake, events.event_clock):
it asks the clock once per job and batch whether the job's clocks can be judged, and places an
event of a job that cannot be judged at its own time without asking moved() for it. The places
must be the ones moved() gives record by record: on a backlog (not judged), on a live job with a
skewed node (moved), and for stamps from the future in either."""

import time

import orjson
from kafka.structs import TopicPartition

from faultlens.events import topics
from faultlens.events.event_clock import EventClock
from faultlens.events.event_time import WatermarkMerge
from faultlens.streams.intake import Intake
from faultlens.streams.kafka_client import Message
from faultlens.streams.runner.types import RunnerStats, broker_time

TP = TopicPartition(topics.TRAIN, 0)


def _step(job: str, node: str, ts: float, offset: int, sent: float) -> Message:
    raw = orjson.dumps({"v": 1, "id": f"{job}.{node}.{offset}", "ts": ts, "job": job, "node": node, "source": "train",
                        "kind": "step", "data": {"rank": 0, "step": offset, "loss": 2.0}})
    return Message(TP.topic, 0, offset, node.encode(), raw, int(sent * 1000))


def _batches(now: float) -> list[list[Message]]:
    """Four batches of two jobs: ``live`` sent as it happened over 90 s, node n3's clock 900 s
    behind; ``backlog`` all sent in the last second; each with one stamp an hour ahead of every clock."""
    batches, offset = [], 0
    for b in range(4):
        batch = []
        for i in range(30):
            sent = now - 90 + 30 * b * 0.75 + i * 0.75
            for n in range(6):
                skew = -900.0 if n == 3 else 0.0
                batch.append(_step("live", f"n{n}", sent + skew, offset, sent))
                batch.append(_step("backlog", f"b{n}", sent - 3600, offset + 1, now - 1 + i * 0.01))
                offset += 2
        batch.append(_step("live", "n1", now + 3600, offset, now))
        batch.append(_step("backlog", "b1", now + 3600, offset + 1, now))
        offset += 2
        batches.append(batch)
    return batches


def test_each_record_is_placed_where_moved_places_it():
    now = time.time()
    intake = Intake({}, 1 << 20, "g", RunnerStats(), EventClock(), WatermarkMerge())
    reference = EventClock()
    placed, expected = [], []
    for batch in _batches(now):
        records, dead = intake.split({TP: batch})
        assert dead == []
        placed += [(r.offset, r.event_ts, r.skew_s, r.clamped) for r in records]
        events = [(m, orjson.loads(m.value)) for m in batch]
        for m, e in events:
            reference.observe(e["job"], e["node"], e["ts"], broker_time(m.timestamp), now)
        for m, e in events:
            at = reference.moved(e["job"], e["node"], e["ts"], broker_time(m.timestamp), now)
            expected.append((m.offset, e["ts"], None, None) if at is None else (m.offset, at.ts, at.skew_s, at.clamped))
    # A stamp from the future is measured against the wall clock of its placing, which differs by
    # however long the test took between the two: its skew is compared loosely, every other place exactly.
    for (o, ts, skew, clamped), (o2, ts2, skew2, clamped2) in zip(placed, expected, strict=True):
        assert (o, clamped, skew is None) == (o2, clamped2, skew2 is None)
        if clamped == "future":
            assert ts == ts2 and abs(skew - skew2) < 120.0, (o, skew, skew2)
        else:
            assert (ts, skew) == (ts2, skew2), o
    moved = {c for _, _, s, c in placed if s is not None}
    assert moved == {"future", None}  # both kinds of move happened: n3 corrected, the stamps clamped
    assert sum(1 for _, _, s, c in placed if c == "future") == 8
    assert any(s is not None and c is None for _, _, s, c in placed)  # the skewed live node, moved back
