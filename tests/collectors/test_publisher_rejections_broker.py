"""An agent's record too large for its Kafka client is dropped, counted and said, and the spool it
waited in drains past it onto a real broker (collectors/publisher.py; the unit tests are in
test_publisher_rejections.py).

The real publisher and its real clients (each in turn) on the session's broker. The spool is one an
agent left behind (records of an outage, a ~2 MB stack dump among them: over kafka-python's 1 MiB
max_request_size and librdkafka's 1 MB message.max.bytes at their defaults, so the client itself
refuses it; Tansu enforces no size). Waits are on the publisher's counters and the topic, never on a
clock."""

from __future__ import annotations

import logging
import uuid

import pytest

from faultlens.collectors.publisher import Publisher
from faultlens.collectors.spool import Spool
from faultlens.collectors.spool_format import SpooledRecord
from faultlens.events.envelope import Envelope, decode, encode
from faultlens.events.topics import topic_for
from tests.kafka_fixtures import wait_for_records
from tests.progress import wait_until

pytestmark = [pytest.mark.broker]

STALL_S = 60.0  # nothing here waits on a broker that is gone: a minute without progress is a block
LOG = "faultlens.collectors.publisher"


def beat(job: str, seq: int, pad: int = 0) -> Envelope:
    data = {"seq": seq, **({"dump": "x" * pad} if pad else {})}
    return Envelope(ts=1.79e9 + seq, job=job, node="n000", source="heartbeat", kind="beat", data=data)


def test_a_record_over_the_clients_size_limit_is_dropped_and_the_spool_drains(client_settings, tmp_path, caplog):
    job = f"refused-{uuid.uuid4().hex[:8]}"
    left = Spool(tmp_path / "spool", 64 << 20)  # what an agent left after an outage
    for seq in range(6):
        event = beat(job, seq, pad=2_000_000 if seq == 3 else 0)
        left.append(SpooledRecord(topic_for(event), event.key, encode(event)), droppable=False)
    left.close()
    spool = Spool(tmp_path / "spool", 64 << 20)
    assert len(spool) == 6
    publisher = Publisher(client_settings, spool, retry_s=0.2)
    stats = publisher.stats
    try:
        with caplog.at_level(logging.WARNING, logger=LOG):
            publisher.start()
            for seq in range(6, 9):
                publisher.publish(beat(job, seq))  # the agent's live records, queued behind the spool
            wait_until(
                lambda: len(spool) == 0 and stats.delivered == 8 and stats.rejected == 1,
                progress=lambda: (len(spool), stats.delivered, stats.rejected),
                stall_s=STALL_S,
                what="the spool to drain past the refused record",
            )
        records = wait_for_records(
            client_settings,
            "telemetry.heartbeat",
            decode,
            job,
            lambda rs: len({e.data["seq"] for e in rs}) >= 8,
            timeout_s=STALL_S,
            progress=len,
        )
        assert publisher.status() == "ok"
    finally:
        publisher.stop()
    assert sorted({e.data["seq"] for e in records}) == [0, 1, 2, 4, 5, 6, 7, 8]
    assert stats.outages == 0 and stats.lost == 0 and publisher.health()["rejected"] == 1
    said = [r.getMessage() for r in caplog.records if "refused for good" in r.getMessage()]
    assert len(said) == 1, said
    assert "telemetry.heartbeat" in said[0] and "too large" in said[0] and "bytes" in said[0]
