"""trainer_hooks/outbox.py: the trainer's telemetry never waits on, nor dies with, the broker.

A fake sink stands for the Kafka producer (a unit test: the real broker's outages are in
test_torchrun_broker_outage.py); waits are on the outbox's own state, never on a clock."""

from __future__ import annotations

import logging
import threading

import pytest

from faultlens.events.envelope import Envelope
from faultlens.streams.broker import free_port
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks.hook import TrainerHook
from faultlens.trainer_hooks.outbox import Outbox
from tests.progress import wait_until


class Sink:
    """A producer whose broker the test switches on and off."""

    def __init__(self, up: threading.Event):
        self.up = up
        self.pending: list[Envelope] = []
        self.delivered: list[int] = []
        self.closed = False

    def send_event(self, event: Envelope) -> None:
        self.pending.append(event)

    def flush(self, timeout=None) -> None:
        batch, self.pending = self.pending, []
        if not self.up.is_set():
            raise RuntimeError("no acknowledgement")
        self.delivered += [e.data["step"] for e in batch]

    def close(self, timeout=0.0) -> None:
        self.closed = True


def step(i: int) -> Envelope:
    return Envelope(ts=1.7e9, job="j", node="n0", source="train", kind="step", data={"rank": 0, "step": i})


def outbox(up: threading.Event, **kwargs) -> tuple[Outbox, list[Sink]]:
    sinks: list[Sink] = []

    def connect() -> Sink:
        if not up.is_set():
            raise ConnectionError("refused")
        sinks.append(Sink(up))
        return sinks[-1]

    return Outbox(None, connect=connect, retry_s=0.01, **kwargs), sinks


def delivered(sinks: list[Sink]) -> list[int]:
    return [s for sink in sinks for s in sink.delivered]


def test_events_wait_out_an_outage_and_arrive_in_order():
    up = threading.Event()
    box, sinks = outbox(up)
    for i in range(5):
        box.send_event(step(i))  # no broker: returns at once
    wait_until(lambda: box.down, progress=lambda: box.pending, stall_s=30, what="the outbox to find no broker")
    assert not box.flush(10.0)  # no wait for a broker that is gone
    assert box.pending == 5 and box.outages == 1
    up.set()
    for i in range(5, 8):
        box.send_event(step(i))
    wait_until(lambda: box.pending == 0, progress=lambda: len(delivered(sinks)), stall_s=30, what="the catch-up")
    assert delivered(sinks) == list(range(8)) and not box.down and box.dropped == 0
    box.close()


def test_a_batch_lost_with_the_broker_is_sent_again_on_a_new_connection():
    up = threading.Event()
    up.set()
    box, sinks = outbox(up)
    box.send_event(step(0))
    assert box.flush(10.0)
    up.clear()
    box.send_event(step(1))
    wait_until(lambda: box.down, progress=lambda: box.pending, stall_s=30, what="the lost broker")
    assert sinks[0].closed  # the broken producer is let go at once
    up.set()
    wait_until(lambda: box.pending == 0, progress=lambda: len(delivered(sinks)), stall_s=30, what="the resend")
    assert delivered(sinks) == [0, 1] and len(sinks) == 2
    box.close()


def test_a_full_spool_drops_the_oldest_with_a_count_and_one_warning(caplog):
    up = threading.Event()
    box, sinks = outbox(up, capacity=10)
    with caplog.at_level(logging.WARNING, logger="faultlens.trainer_hooks.outbox"):
        for i in range(25):
            box.send_event(step(i))
        assert box.pending == 10 and box.dropped == 15
        assert sum("spool full" in r.getMessage() for r in caplog.records) == 1
    up.set()
    wait_until(lambda: box.pending == 0, progress=lambda: len(delivered(sinks)), stall_s=30, what="the catch-up")
    assert delivered(sinks) == list(range(15, 25))  # the newest ten
    box.close()


def test_close_with_no_broker_returns_and_counts_what_was_left(caplog):
    up = threading.Event()
    box, _ = outbox(up)
    box.send_event(step(0))
    wait_until(lambda: box.down, progress=lambda: box.pending, stall_s=30, what="the outbox to find no broker")
    with caplog.at_level(logging.WARNING, logger="faultlens.trainer_hooks.outbox"):
        box.close(10.0)
    assert "1 not" in caplog.text
    box.send_event(step(1))  # after close: counted, not queued, no error
    assert box.dropped == 1


def test_a_hook_with_no_broker_at_start_trains_and_closes(tmp_path):
    """The real hook and its real Kafka clients against a port nothing listens on."""
    settings = KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}")
    hook = TrainerHook(job="j", rank=0, node="n0", settings=settings, keys=(), state_dir=tmp_path,
                       flight_recorder=False)
    assert hook.wait_ready() is False  # at once: no broker answers
    for _ in range(20):
        hook.step(loss=1.0)
    assert hook.steps == 20
    hook.close()
    assert hook.outbox is not None and hook.outbox.pending == 20 and hook.outbox.delivered == 0


@pytest.mark.parametrize("bad", [None, KafkaSettings()])
def test_an_outbox_with_nowhere_to_send_is_refused_at_once(bad):
    with pytest.raises(ValueError, match="broker address"):
        Outbox(bad)


class StubbornSink(Sink):
    """A producer that cannot close while its broker is away (its own queue still holds records),
    as kafka-python's close(0) raises then."""

    def close(self, timeout=0.0) -> None:
        if not self.up.is_set():
            raise TimeoutError("records still queued")
        self.closed = True


def test_a_producer_let_go_in_an_outage_is_closed_once_it_can_be():
    up = threading.Event()
    up.set()
    sinks: list[Sink] = []

    def connect() -> Sink:
        if not up.is_set():
            raise ConnectionError("refused")
        sinks.append(StubbornSink(up))
        return sinks[-1]

    box = Outbox(None, connect=connect, retry_s=0.01)
    box.send_event(step(0))
    assert box.flush(10.0)
    up.clear()
    box.send_event(step(1))
    wait_until(lambda: box.down, progress=lambda: box.pending, stall_s=30, what="the lost broker")
    assert not sinks[0].closed  # let go, not yet closed: one network thread per outage would pile up
    up.set()
    wait_until(lambda: sinks[0].closed, progress=lambda: (box.pending, len(sinks)), stall_s=30,
               what="the abandoned producer's close")
    assert delivered(sinks) == [0, 1]
    box.close()
