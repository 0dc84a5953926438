"""The trainer hook's close is bounded as a whole (trainer_hooks/outbox.py, FAULTLENS_HOOK_CLOSE_S):
a broker slow or gone must not hold the trainer's exit. Before, the outbox's flush of the bound was
followed by a wait for its sender thread of up to flush_s + 1 more: 16 s in all against a peer that
takes connections and never answers. What the close leaves undelivered is counted and said.

A fake sink stands for the producer: its flush blocks (a broker that never acknowledges) until the
test lets it go; no assertion on a wall time, the close's own accounting is what is checked."""

from __future__ import annotations

import logging
import threading

import pytest

from faultlens.events.envelope import Envelope
from faultlens.streams.broker import free_port
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks import hook as hook_module
from faultlens.trainer_hooks.hook import TrainerHook, close_bound
from faultlens.trainer_hooks.outbox import Outbox


class SilentSink:
    """A producer whose broker takes the records and never acknowledges them, until ``released``."""

    def __init__(self, released: threading.Event, flushing: threading.Event):
        self.released, self.flushing = released, flushing
        self.closed_with: list[float] = []

    def send_event(self, event: Envelope) -> None:
        pass

    def flush(self, timeout=None) -> None:
        self.flushing.set()
        self.released.wait()
        raise RuntimeError("no acknowledgement")

    def close(self, timeout=0.0) -> None:
        self.closed_with.append(timeout)
        self.released.set()  # as a producer closed at once fails its pending records


def step(i: int) -> Envelope:
    return Envelope(ts=1.7e9, job="j", node="n0", source="train", kind="step", data={"rank": 0, "step": i})


class JoinSpy(threading.Thread):
    """The outbox's sender thread, with the timeouts its close waited for it."""

    waits: list[float | None]

    def join(self, timeout=None):  # type: ignore[override]
        self.waits.append(timeout)
        super().join(timeout)


@pytest.fixture
def silent(monkeypatch):
    released, flushing = threading.Event(), threading.Event()
    sinks: list[SilentSink] = []

    def connect() -> SilentSink:
        sinks.append(SilentSink(released, flushing))
        return sinks[-1]

    JoinSpy.waits = []
    monkeypatch.setattr("faultlens.trainer_hooks.outbox.threading.Thread", JoinSpy)
    box = Outbox(None, connect=connect, retry_s=0.01, flush_s=60.0)
    yield box, sinks, flushing
    released.set()
    box._thread.join()  # ends at once once let go (a daemon otherwise: never left behind a test)


def test_the_close_waits_for_its_thread_only_what_is_left_of_its_bound(silent, caplog):
    box, sinks, flushing = silent
    for i in range(7):
        box.send_event(step(i))
    assert flushing.wait(60), "the sender thread never reached its flush"
    with caplog.at_level(logging.WARNING, logger="faultlens.trainer_hooks.outbox"):
        box.close(0.2)
    # the flush used the whole bound (the broker never answered): nothing was left for the thread;
    # before, the join was given min(timeout, flush_s + 1) more on top
    assert JoinSpy.waits == [0.0]
    assert box.cut_short and box.undelivered == 7
    assert sinks[0].closed_with[:1] == [0.0]  # the busy producer let go at once: its thread ends
    [said] = [r.getMessage() for r in caplog.records if "not (broker" in r.getMessage()]
    assert "7 not (broker slow, the close's 0.2 s bound reached)" in said


def test_a_close_within_its_bound_is_not_cut_short():
    box = Outbox(None, connect=lambda: _Taking(), retry_s=0.01)
    for i in range(3):
        box.send_event(step(i))
    box.close(60.0)
    assert not box.cut_short and box.undelivered == 0 and box.delivered == 3


class _Taking:
    def send_event(self, event: Envelope) -> None:
        pass

    def flush(self, timeout=None) -> None:
        pass

    def close(self, timeout=0.0) -> None:
        pass


def test_the_bound_comes_from_the_environment_with_a_small_default(caplog):
    assert close_bound({}) == hook_module.CLOSE_S == 3.0
    assert close_bound({"FAULTLENS_HOOK_CLOSE_S": "0.5"}) == 0.5
    assert close_bound({"FAULTLENS_HOOK_CLOSE_S": "0"}) == 0.0
    for bad in ("soon", "-1", "nan", "inf"):
        assert close_bound({"FAULTLENS_HOOK_CLOSE_S": bad}) == hook_module.CLOSE_S
    assert "FAULTLENS_HOOK_CLOSE_S='soon'" in caplog.text


def test_the_hook_closes_its_outbox_with_the_bound(monkeypatch):
    monkeypatch.setenv("FAULTLENS_HOOK_CLOSE_S", "1.5")
    settings = KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}", client_id="trainer-j-0")
    hook = TrainerHook(job="j", rank=0, node="n0", settings=settings, listen=False, flight_recorder=False)
    closed_with: list[float] = []
    close = hook.outbox.close
    monkeypatch.setattr(hook.outbox, "close", lambda timeout: (closed_with.append(timeout), close(timeout)))
    hook.close()
    assert closed_with == [1.5]
    given = TrainerHook(job="j", rank=0, node="n0", settings=settings, listen=False, flight_recorder=False, close_s=0.25)
    given.close()
    assert given.close_s == 0.25
