"""A consumer whose broker stops answering says so in faultlens's own words, once past a bound,
then at doubling intervals, and says when it answers again; it never stops retrying
(streams/runner/broker_watch.py). The loop's clock is handed in: no wall time is waited for."""

from __future__ import annotations

import logging

from faultlens.streams.runner.broker_watch import ENV, MAX_REPEAT_S, PROBE_EVERY_S, BrokerWatch, down_after_s


class _Broker:
    def __init__(self) -> None:
        self.up = True
        self.asked = 0

    def __call__(self, bootstrap: str, timeout: float) -> bool:
        self.asked += 1
        return self.up


def _errors(caplog, level=logging.ERROR) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.endswith("broker_watch") and r.levelno == level]


def test_a_broker_gone_past_the_bound_is_one_error_then_again_at_doubling_intervals_and_its_return_is_said(caplog):
    caplog.set_level(logging.INFO)
    broker = _Broker()
    watch = BrokerWatch("kafka-1:9093", down_after=60.0, probe=broker)
    watch.polled(True, 0.0)
    broker.up = False
    for second in range(1, 1000):  # a loop polling every second, reading nothing
        watch.polled(False, float(second))
    said = _errors(caplog)
    assert said and all("Kafka broker kafka-1:9093 unreachable for" in m and "retrying" in m for m in said)
    # at the first probe past 60 s of silence (probes every 5 s from the first empty poll), then
    # 60, 120, 240 and 480 s later
    assert [int(m.split("for ")[1].split("s")[0]) for m in said] == [61, 121, 241, 481, 961]
    assert watch.unreachable
    assert broker.asked <= 1000 / PROBE_EVERY_S + 1  # asked every PROBE_EVERY_S, not every poll
    watch.polled(True, 1000.0)  # the client reconnected by itself: records again
    assert not watch.unreachable
    assert _errors(caplog, logging.WARNING) == ["Kafka broker kafka-1:9093 answers again after 1000s unreachable"]


def test_a_quiet_stream_on_a_broker_that_answers_says_nothing():
    broker = _Broker()
    watch = BrokerWatch("b:9092", down_after=60.0, probe=broker)
    for second in range(0, 600):
        watch.polled(False, float(second))
    assert not watch.unreachable and broker.asked == 600 // int(PROBE_EVERY_S)


def test_the_repeats_stop_growing_at_fifteen_minutes(caplog):
    broker = _Broker()
    broker.up = False
    watch = BrokerWatch("b:9092", down_after=600.0, probe=broker)
    for second in range(0, 8000, 5):
        watch.polled(False, float(second))
    silences = [int(m.split("for ")[1].split("s")[0]) for m in _errors(caplog)]
    assert silences[:2] == [600, 1200] and len(silences) > 4
    assert {b - a for a, b in zip(silences[1:-1], silences[2:], strict=True)} == {int(MAX_REPEAT_S)}  # not 1200, 2400


def test_the_bound_comes_from_the_environment_and_a_bad_value_is_said(caplog):
    assert down_after_s({}) == 60.0
    assert down_after_s({ENV: "15"}) == 15.0
    assert down_after_s({ENV: " 2.5 "}) == 2.5
    caplog.set_level(logging.WARNING)
    for bad in ("soon", "0", "-3", "nan"):
        assert down_after_s({ENV: bad}) == 60.0
    # Said by the one reader of numbers from the environment (events/env_number.py), naming the variable.
    said = [r.getMessage() for r in caplog.records if r.name.endswith("env_number")]
    assert said == [f"{ENV}={bad!r} is not a number over 0; using 60" for bad in ("soon", "0", "-3", "nan")]
