"""The pipeline's shutdown drain: downstream consumers read to their end in the order one feeds the next, and one
still reading at the bound is stopped and said (its records stay in Kafka for its group's next start)."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

from faultlens.pipeline import Consumer, Pipeline


class _Runner:
    """A runner whose thread ends once asked to stop when drained, or (``drains`` False) only when the test ends it."""

    def __init__(self, name: str, calls: list[str], drains: bool = True):
        self.name, self.calls, self.drains = name, calls, drains
        self.asked = threading.Event()
        self.stats = SimpleNamespace(lag=0 if drains else 1234)

    def stop_when_drained(self) -> None:
        self.calls.append(f"drain {self.name}")
        self.asked.set()

    def run(self, done: threading.Event) -> None:
        self.asked.wait()
        if self.drains:
            self.calls.append(f"ended {self.name}")
        else:
            done.wait()  # reading a stream whose writers go on: ends only when stopped


def _consumer(name: str, calls: list[str], done: threading.Event, drains: bool = True) -> Consumer:
    runner = _Runner(name, calls, drains)
    c = Consumer(name, runner, handler=None)  # type: ignore[arg-type]
    c.thread = threading.Thread(target=runner.run, args=(done,), daemon=True)
    c.thread.start()
    return c


def test_each_downstream_consumer_reads_to_its_end_before_the_next_is_asked() -> None:
    calls: list[str] = []
    done = threading.Event()
    consumers = [_consumer("remediate", calls, done), _consumer("history", calls, done)]
    Pipeline._drain(consumers, limit_s=60)
    # The history is asked only once remediation (whose commands it reads) has ended.
    assert calls == ["drain remediate", "ended remediate", "drain history", "ended history"]
    assert not any(c.thread.is_alive() for c in consumers if c.thread is not None)


def test_a_consumer_still_reading_at_the_bound_is_left_to_its_stop_and_said(caplog) -> None:
    calls: list[str] = []
    done = threading.Event()
    # One consumer alone: with a short bound, a busy machine must not make a consumer that does drain look late.
    consumers = [_consumer("history", calls, done, drains=False)]
    with caplog.at_level(logging.WARNING, logger="faultlens.pipeline"):
        Pipeline._drain(consumers, limit_s=0.3)
    done.set()
    assert calls == ["drain history"]
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == ["history was still reading at shutdown (about 1234 record(s) behind); its group reads them at its next start"]
