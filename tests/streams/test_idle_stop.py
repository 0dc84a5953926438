"""A bounded run's idle stop (streams/idle_stop.py): quiet counts from the last records or the last
assignment, takes several empty polls, and waits (bounded) for records still unread."""

from __future__ import annotations

from faultlens.streams.idle_stop import IdleStop


def test_one_slow_loop_is_not_quiet():
    # a starved member: one loop of 6.3 s with nothing polled after taking partitions over
    idle = IdleStop(6.0)
    idle.start(0.0)
    idle.polled(6.3, got_records=False)
    assert not idle.due(6.3, lambda: True)
    idle.polled(6.5, False)
    idle.polled(6.7, False)
    assert idle.due(6.7, lambda: True)


def test_records_restart_the_count():
    idle = IdleStop(2.0, min_empty_polls=1)
    idle.start(0.0)
    idle.polled(1.5, False)
    idle.polled(1.9, True)
    idle.polled(3.0, False)
    assert not idle.due(3.0, lambda: True)
    assert idle.due(3.9, lambda: True)


def test_unread_records_hold_the_stop_for_a_bounded_time():
    asked = []
    idle = IdleStop(2.0, min_empty_polls=1, unread_wait_s=10.0)
    idle.start(0.0)
    idle.polled(2.0, False)
    assert not idle.due(2.0, lambda: asked.append(1) or False)
    assert not idle.due(11.9, lambda: False)
    assert idle.due(12.0, lambda: False)  # a member in a rebalance's limbo still ends its run
    assert asked == [1]


def test_drained_is_not_asked_before_the_run_is_quiet():
    idle = IdleStop(2.0, min_empty_polls=1)
    idle.start(0.0)
    idle.polled(1.0, False)
    assert not idle.due(1.0, lambda: 1 / 0)
