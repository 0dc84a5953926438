"""The node agent's publisher drops a record refused for good (too large, an invalid topic, no
authorization), counts it and says it, and its spool goes on: spooled and sent again it would fail
again, hold the spool behind it for good and keep the agent reporting itself spooling
(collectors/publisher.py, streams/producer.py's rejection_kind and RefusalVoice).

Unit tests: the real Publisher, Spool and Producer over a fake client backend (kafka-python's own
error types) and a broker that answers or not. The real broker and client are in
test_publisher_rejections_broker.py."""

from __future__ import annotations

import logging
import threading

import pytest
from kafka import errors as kafka_errors

from faultlens.collectors.publisher import Publisher
from faultlens.collectors.spool import Spool
from faultlens.events.envelope import Envelope, encode
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import RefusalVoice, Rejected
from tests.progress import wait_until

LOG = "faultlens.collectors.publisher"
LIMIT = 4096
STALL_S = 30.0  # nothing here waits on a broker or a clock: this long without progress is a block


def event(i: int, pad: int = 0) -> Envelope:
    data = {"gpu": 0, "i": i, **({"pad": "x" * pad} if pad else {})}
    return Envelope(ts=1.7e9 + i, job="j", node="n0", source="gpu", kind="sample", data=data)


class Backend:
    """A client that refuses for good every record over LIMIT bytes (in send, as kafka-python does
    over its max_request_size, or through the delivery callback, as librdkafka does) and loses every
    record while the broker is away."""

    def __init__(self, on_failure, up: threading.Event, raise_in_send: bool):
        self.on_failure, self.up, self.raise_in_send = on_failure, up, raise_in_send
        self.delivered: list[bytes] = []

    def send(self, topic, key, value, partition=None):
        if len(value) > LIMIT:
            error = kafka_errors.MessageSizeTooLargeError(f"{len(value)} bytes")
            if self.raise_in_send:
                raise error
            self.on_failure(topic, error, value)
        elif not self.up.is_set():
            self.on_failure(topic, kafka_errors.KafkaTimeoutError("batch expired"), value)
        else:
            self.delivered.append(value)

    def flush(self, timeout):
        pass

    def close(self, timeout):
        pass


@pytest.fixture(params=[True, False], ids=["refused-in-send", "refused-by-callback"])
def rig(request, monkeypatch, tmp_path):
    up = threading.Event()
    backends: list[Backend] = []

    def open_producer(settings, on_failure, **kw):
        backends.append(Backend(on_failure, up, request.param))
        return backends[-1]

    monkeypatch.setattr("faultlens.streams.producer.open_producer", open_producer)
    monkeypatch.setattr("faultlens.collectors.publisher.answers", lambda bootstrap, timeout: up.is_set())
    spool = Spool(tmp_path / "spool", 1 << 20)
    publisher = Publisher(KafkaSettings(bootstrap="127.0.0.1:1"), spool, retry_s=0.05, create_topics=False)
    yield publisher, spool, up, backends
    publisher.stop(5.0)


def delivered(backends: list[Backend]) -> list[int]:
    from faultlens.events.envelope import decode

    return [decode(v).data["i"] for b in backends for v in b.delivered]


def test_a_refused_record_in_the_spool_is_dropped_and_the_spool_drains(rig, caplog):
    publisher, spool, up, backends = rig
    with caplog.at_level(logging.WARNING, logger=LOG):
        publisher.start()
        for i in range(10):
            publisher.publish(event(i, pad=2 * LIMIT if i == 4 else 0))  # broker away: all spooled
        wait_until(
            lambda: publisher.stats.spooled == 10, progress=lambda: publisher.stats.spooled, stall_s=STALL_S, what="spooling"
        )
        up.set()
        wait_until(
            lambda: len(spool) == 0 and publisher.stats.rejected == 1,
            progress=lambda: (len(spool), publisher.stats.delivered, publisher.stats.rejected),
            stall_s=STALL_S,
            what="the spool to drain past the refused record",
        )
        for i in range(10, 13):
            publisher.publish(event(i))
        wait_until(
            lambda: publisher.stats.delivered == 12,
            progress=lambda: publisher.stats.delivered,
            stall_s=STALL_S,
            what="new records to go straight out",
        )
    assert delivered(backends) == [i for i in range(13) if i != 4]
    assert publisher.status() == "ok" and publisher.connected
    health = publisher.health()
    assert health["rejected"] == 1 and health["lost"] == 0 and health["outages"] == 0
    said = [r.getMessage() for r in caplog.records if "refused for good" in r.getMessage()]
    assert len(said) == 1 and "telemetry.gpu" in said[0] and "too large" in said[0]
    assert f"{len(encode(event(4, pad=2 * LIMIT)))} bytes" in said[0]


def test_a_refused_record_sent_straight_out_is_no_outage(rig, caplog):
    publisher, spool, up, backends = rig
    up.set()
    with caplog.at_level(logging.WARNING, logger=LOG):
        publisher.start()
        wait_until(lambda: publisher.connected, progress=lambda: 0, stall_s=STALL_S, what="the publisher to connect")
        for i in range(6):
            publisher.publish(event(i, pad=2 * LIMIT if i % 2 else 0))
        wait_until(
            lambda: publisher.stats.delivered + publisher.stats.rejected == 6,
            progress=lambda: (publisher.stats.delivered, publisher.stats.rejected),
            stall_s=STALL_S,
            what="the batch",
        )
    assert delivered(backends) == [0, 2, 4] and publisher.stats.rejected == 3
    assert publisher.stats.spooled == 0 and publisher.stats.outages == 0 and publisher.connected
    # three refusals of one kind: said once (the next at most a minute later, with the count)
    assert sum("refused for good" in r.getMessage() for r in caplog.records) == 1


def test_a_refusal_with_the_broker_lost_is_an_outage_then_dropped_once_alone(rig, monkeypatch):
    """A batch where something else failed too was not acknowledged: it is spooled whole (nothing
    lost to a refusal counted early), and the refused record is dropped when it fails alone."""
    publisher, spool, up, backends = rig
    # The broker answers a probe but acknowledges nothing until ``up``: both records go in the
    # publisher's first batch, together.
    monkeypatch.setattr("faultlens.collectors.publisher.answers", lambda bootstrap, timeout: True)
    publisher.publish(event(0, pad=2 * LIMIT))
    publisher.publish(event(1))
    publisher.start()
    wait_until(
        lambda: publisher.stats.outages >= 1 and len(spool) == 2,
        progress=lambda: (publisher.stats.outages, len(spool)),
        stall_s=STALL_S,
        what="the outage",
    )
    assert publisher.stats.rejected == 0 and delivered(backends) == []
    up.set()
    wait_until(lambda: len(spool) == 0, progress=lambda: len(spool), stall_s=STALL_S, what="the spool to drain")
    assert publisher.stats.rejected == 1 and delivered(backends) == [1]


def test_a_kind_of_refusal_is_said_again_a_minute_later_with_the_count(caplog):
    voice = RefusalVoice(logging.getLogger(LOG), "publisher", "dropped")
    big, bad = Rejected("telemetry.gpu", "too large", b"x" * 10), Rejected("bad topic", "invalid topic", b"y")
    with caplog.at_level(logging.WARNING, logger=LOG):
        voice.say([big, big, bad], now=100.0)
        voice.say([big], now=130.0)
        voice.say([big], now=161.0)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3
    assert "telemetry.gpu" in said[0] and "(too large, 10 bytes)" in said[0] and "more" not in said[0]
    assert "bad topic" in said[1] and "invalid topic" in said[1]
    assert "2 more so since the last said" in said[2]
