"""The demo's history writes paced while the simulation runs: one batch a second instead of one per poll,
the same records handed on, and released at once when the run ends."""

from __future__ import annotations

import threading

from faultlens.demo.wiring import PacedWrites
from faultlens.streams.runner.handler import HandlerParts
from faultlens.streams.runner.options import RunnerOptions


class _Runner:
    """What PacedWrites touches of a GroupRunner not started yet: its resolved handler and options."""

    def __init__(self, handle, tick=None):
        self.handler = HandlerParts(handle=handle, tick=tick)
        self.options = RunnerOptions(max_records=10)


def _in_thread(fn, *args):
    done = threading.Event()
    result = {}

    def target():
        result["out"] = fn(*args)
        done.set()

    threading.Thread(target=target, daemon=True).start()
    return done, result


def test_a_batch_is_handled_at_once_then_the_next_poll_waits_until_released():
    handled = []
    entered = threading.Event()

    def handle(records):
        handled.append(list(records))
        entered.set()
        return [f"out-{r}" for r in records]

    tick = object()
    runner = _Runner(handle, tick=tick)
    paced = PacedWrites(runner, every_s=3600.0)
    assert runner.handler.tick is tick and runner.handler.handle == paced.handle  # only its handle is wrapped
    done, result = _in_thread(runner.handler.handle, [1, 2, 3])
    assert entered.wait(30)
    assert handled == [[1, 2, 3]]  # written before the wait, so the runner commits only what was written
    assert not done.wait(0.2)  # paced: the runner is held back from its next poll
    paced.release()
    assert done.wait(30) and result["out"] == ["out-1", "out-2", "out-3"]
    # released: later batches are not held
    done, result = _in_thread(runner.handler.handle, [4, 5])
    assert done.wait(30) and result["out"] == ["out-4", "out-5"] and paced.batches == 2


def test_one_record_at_a_time_retries_are_not_paced():
    # GroupRunner retries a failed batch one record at a time: pacing those would take a second each
    runner = _Runner(lambda records: list(records))
    PacedWrites(runner, every_s=3600.0)
    done, result = _in_thread(runner.handler.handle, ["r"])
    assert done.wait(30) and result["out"] == ["r"]


def test_a_consumer_that_is_behind_reads_on_unpaced():
    # half a poll's max_records or more: the history fell behind, and pacing would cap it at a poll a second
    runner = _Runner(lambda records: list(records))
    PacedWrites(runner, every_s=3600.0)
    done, result = _in_thread(runner.handler.handle, list(range(5)))
    assert done.wait(30) and result["out"] == list(range(5))


def test_a_failing_batch_is_not_held():
    def handle(records):
        raise ValueError("bad record")

    runner = _Runner(handle)
    PacedWrites(runner, every_s=3600.0)
    failed = threading.Event()

    def call():
        try:
            runner.handler.handle([1, 2])
        except ValueError:
            failed.set()

    threading.Thread(target=call, daemon=True).start()
    assert failed.wait(30)
