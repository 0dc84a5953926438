"""Issue 32's backlog check with the stage members starved of CPU: a process per core burns it for
the whole run, and the members lag behind the backlog by as much as the machine makes them."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from tests.diagnosis.backlog_split import TEST_SHAPES, assert_as_offline, cases, run_backlog

pytestmark = pytest.mark.broker


def _burn(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


@pytest.mark.timeout(420)
def test_members_starved_of_cpu_read_a_backlog_and_evict_no_healthy_machine(own_kafka_settings, tmp_path):
    burners = [multiprocessing.get_context("spawn").Process(target=_burn, args=(time.time() + 400,), daemon=True)
               for _ in range(os.cpu_count() or 2)]
    for b in burners:
        b.start()
    try:
        outcomes = run_backlog(own_kafka_settings, cases(range(3, 4), TEST_SHAPES), tmp_path, after_end_s=40.0)
    finally:
        for b in burners:
            b.terminate()
    assert_as_offline(outcomes)
