"""Split stages read seeds of several trace shapes as one backlog through the broker, and the job
stage's wall clock then moves every job's time past the end of its stream (issue 32: healthy
machines were evicted as silent there, 5 on two seeds of hang_16x8_phased before the fix). The
acting diagnoses are `faultlens analyze`'s and no healthy machine is evicted, with (2,2) and (3,3)
members, and with the members starved of CPU. More seeds: bench/bench_silence_backlog.py."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from tests.diagnosis.backlog_split import cases, run_backlog

pytestmark = pytest.mark.broker

SHAPES = ("hang_16x8_phased", "dead_agent", "sim-hang")


def _check(outcomes) -> None:
    report = [(o.case.name, sorted(o.missing), sorted(o.extra), sorted(o.healthy_evicted)) for o in outcomes]
    assert all(not o.healthy_evicted for o in outcomes), report
    assert all(not o.missing and not o.extra for o in outcomes), report
    # the end of every stream is named, as the job's or the pipeline's, never a machine's
    assert all(any(d.fault == "telemetry_lost" for d in o.live) for o in outcomes), report


@pytest.mark.timeout(420)
@pytest.mark.parametrize("node_members,job_members,seeds", [(2, 2, range(2)), (3, 3, range(2, 3))])
def test_split_stages_read_seeds_of_a_backlog_and_evict_no_healthy_machine(own_kafka_settings, tmp_path,
                                                                             node_members, job_members, seeds):
    _check(run_backlog(own_kafka_settings, cases(seeds, SHAPES), tmp_path, node_members=node_members,
                       job_members=job_members, after_end_s=40.0))


def _burn(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


@pytest.mark.timeout(420)
def test_split_stages_starved_of_cpu_evict_no_healthy_machine(own_kafka_settings, tmp_path):
    """A process per core burns CPU for the whole run: the members lag behind the backlog by as much
    as the machine makes them."""
    burners = [multiprocessing.get_context("spawn").Process(target=_burn, args=(time.time() + 400,), daemon=True)
               for _ in range(os.cpu_count() or 2)]
    for b in burners:
        b.start()
    try:
        outcomes = run_backlog(own_kafka_settings, cases(range(3, 4), SHAPES), tmp_path, after_end_s=40.0)
    finally:
        for b in burners:
            b.terminate()
    _check(outcomes)
