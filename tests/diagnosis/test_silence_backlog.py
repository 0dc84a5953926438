"""Split stages read seeds of several trace shapes as one backlog through the broker, and the job
stage's wall clock then moves every job's time past the end of its stream (issue 32: healthy
machines were evicted as silent there, 5 on two seeds of hang_16x8_phased before the fix). The
acting diagnoses are `faultlens analyze`'s and no healthy machine is evicted, with (2,2) members
here, (3,3) and starved of CPU beside it. More seeds: bench/bench_silence_backlog.py."""

from __future__ import annotations

import pytest

from bench.testbed.backlog_split import TEST_SHAPES, assert_as_offline, cases, run_backlog
from tests.diagnosis.live_members import finish_node_members

pytestmark = pytest.mark.broker


@pytest.mark.long(75)
@pytest.mark.timeout(420)
def test_two_and_two_members_read_seeds_of_a_backlog_and_evict_no_healthy_machine(own_kafka_settings, tmp_path):
    # The job stage stays up 12 wall seconds past its last record, its wall clock moving quiet jobs
    # 6 event seconds a wall second after the 5 s grace: ~42 event seconds judged past every
    # stream's end, as 40 wall seconds at the wall clock's own pace did (issue 47: 20 s at 2.5 until S6).
    # One seed of each shape (S7): two seeds were 6 jobs and ~35 CPU-s, one is 3 jobs and ~20. The old
    # rule evicted healthy machines on every seed of the phased hang (bench/results_silence.md's 36-job
    # backlog); seed 0 alone fails with it (each node judged alone by its beats once the wall clock
    # moved the job past its stream's end: h100-00... evicted). Seeds 2 and 3 are the 3+3 and the
    # starved files' own.
    outcomes = run_backlog(own_kafka_settings, cases(range(1), TEST_SHAPES), tmp_path, node_members=2,
                           job_members=2, after_end_s=12.0, wall_rate=6.0,
                           finish_nodes=finish_node_members)
    assert_as_offline(outcomes)
