"""A bounded run's idle stop (streams/idle_stop.py): quiet counts from the last records or the last
assignment, in empty polls (a poll's length at most each, none for a stall of the process), takes
several empty polls, and waits (bounded) for records still unread. The clock is injected."""

from __future__ import annotations

from faultlens.streams.idle_stop import STALL_S, IdleStop, JoinWait


def _empty_polls(idle: IdleStop, start: float, until: float, step: float = 0.2) -> float:
    t = start
    while t < until - 1e-9:
        t = round(t + step, 3)
        idle.polled(t, False)
    return t


def test_one_slow_loop_is_not_quiet():
    # a starved member: one loop of 6.3 s with nothing polled after taking partitions over
    idle = IdleStop(6.0, poll_s=0.2)
    idle.start(0.0)
    idle.polled(6.3, got_records=False)
    assert not idle.due(6.3, lambda: True)
    idle.polled(6.5, False)
    idle.polled(6.7, False)
    assert not idle.due(6.7, lambda: True)  # 0.4 s of quiet, not 6.7
    t = _empty_polls(idle, 6.7, 12.7)
    assert idle.due(t, lambda: True)


def test_records_restart_the_count():
    idle = IdleStop(2.0, min_empty_polls=1, poll_s=0.2)
    idle.start(0.0)
    _empty_polls(idle, 0.0, 1.6)
    idle.polled(1.8, True)
    t = _empty_polls(idle, 1.8, 3.0)
    assert not idle.due(t, lambda: True)
    t = _empty_polls(idle, t, 3.8)
    assert idle.due(t, lambda: True)


def test_unread_records_hold_the_stop_for_a_bounded_time():
    asked = []
    idle = IdleStop(2.0, min_empty_polls=1, unread_wait_s=10.0, poll_s=0.2)
    idle.start(0.0)
    t = _empty_polls(idle, 0.0, 2.0)
    assert not idle.due(t, lambda: asked.append(1) or False)
    t = _empty_polls(idle, t, 11.8)
    assert not idle.due(t, lambda: False)
    t = _empty_polls(idle, t, 12.0)
    assert idle.due(t, lambda: False)  # a member in a rebalance's limbo still ends its run
    assert asked == [1]


def test_drained_is_not_asked_before_the_run_is_quiet():
    idle = IdleStop(2.0, min_empty_polls=1, poll_s=0.2)
    idle.start(0.0)
    _empty_polls(idle, 0.0, 1.0)
    assert not idle.due(1.0, lambda: 1 / 0)


# --- a stall of the process is not quiet (session 25, F1's SIGSTOP reproduction) ---------------
def test_a_stopped_process_is_not_quiet():
    # two members stopped right after a 20 s SIGSTOP ("quiet for 23s"): the poll that returns
    # after the stop brought nothing, and the stop's 20 s counted as quiet
    idle = IdleStop(6.0, poll_s=0.2)
    idle.start(0.0)
    for t in (0.2, 0.4, 0.6):
        idle.polled(t, False)
    idle.polled(20.6, False)  # SIGSTOPped for 20 s inside the poll
    idle.polled(20.8, False)
    idle.polled(21.0, False)
    assert not idle.due(21.0, lambda: True)


def test_after_a_stall_quiet_is_counted_in_polls_that_ran():
    idle = IdleStop(2.0, poll_s=0.2)
    idle.start(0.0)
    idle.polled(30.0, False)  # the stall: no quiet at all
    t = 30.0
    while not idle.due(t, lambda: True):
        t = round(t + 0.2, 1)
        idle.polled(t, False)
        assert t < 40
    # the whole idle time, in polls that ran after the resume
    assert 31.9 <= t <= 32.1


def test_a_stall_needs_several_empty_polls_again():
    idle = IdleStop(2.0, min_empty_polls=3, poll_s=0.2)
    idle.start(0.0)
    t = 0.0
    for _ in range(20):
        t = round(t + 0.2, 1)
        idle.polled(t, False)
    assert idle.due(t, lambda: True)
    idle.polled(t + 25.0, False)  # a stall after enough quiet: the poll after a resume proves nothing
    assert not idle.due(t + 25.0, lambda: True)
    idle.polled(t + 25.2, False)
    idle.polled(t + 25.4, False)
    assert not idle.due(t + 25.4, lambda: True)
    idle.polled(t + 25.6, False)
    assert idle.due(t + 25.6, lambda: True)


def test_a_loop_always_slow_still_ends_its_run():
    # a starved machine where every loop takes 3 s: quiet still grows, a poll's credit at a time
    idle = IdleStop(2.0, poll_s=0.2)
    idle.start(0.0)
    t = 0.0
    while not idle.due(t, lambda: True):
        t += 3.0
        idle.polled(t, False)
        assert t < 300


# --- a join's wait, counted the same way ---------------------------------------------------------
def test_a_join_is_stuck_after_its_grace_in_polls():
    wait = JoinWait(2.0, poll_s=0.2)
    t = 0.0
    wait.polled(t)
    while not wait.stuck:
        t = round(t + 0.2, 3)
        wait.polled(t)
        assert t < 10
    assert 1.9 <= t <= 2.1


def test_a_stopped_process_is_one_long_poll_of_a_join():
    # SIGSTOPped 30 s mid-join: the join has not been waited on for 30 s of the process's time
    wait = JoinWait(10.0, poll_s=0.2)
    wait.polled(0.0)
    wait.polled(0.2)
    wait.polled(30.2)
    assert not wait.stuck and wait.waited_s <= 0.2 + 0.2 + STALL_S + 1e-9
    wait.reset()
    wait.polled(40.0)
    assert wait.waited_s == 0.0


def test_polls_blocking_in_a_join_still_make_it_stuck():
    # each poll blocks 90 s in a join that never completes
    wait = JoinWait(30.0, poll_s=0.2)
    t = 0.0
    wait.polled(t)
    for _ in range(6):
        t += 90.0
        wait.polled(t)
    assert wait.stuck


def test_a_loop_always_slower_than_a_stall_still_ends_its_run():
    # every loop 6 s (a handler's clock working through many jobs on a starved machine): the first
    # gap is taken for a stall, the ones after it for slow loops, each a poll's credit
    idle = IdleStop(2.0, poll_s=0.2)
    idle.start(0.0)
    t = 0.0
    while not idle.due(t, lambda: True):
        t += 6.0
        idle.polled(t, False)
        assert t < 300
    assert idle.stalls == 1
