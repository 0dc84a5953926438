"""Issue 32's backlog check with three members in each stage (test_silence_backlog.py has the two;
in files of their own so that the test runner can spread them)."""

from __future__ import annotations

import pytest

from bench.testbed.backlog_split import TEST_SHAPES, assert_as_offline, cases, run_backlog
from tests.diagnosis.live_members import finish_node_members

pytestmark = pytest.mark.broker


@pytest.mark.long(70)
@pytest.mark.timeout(420)
def test_three_and_three_members_read_a_backlog_and_evict_no_healthy_machine(own_kafka_settings, tmp_path):
    # The job stage stays up 12 wall seconds past its last record, its wall clock moving quiet jobs
    # 6 event seconds a wall second after the 5 s grace: ~42 event seconds judged past every
    # stream's end, as 40 wall seconds at the wall clock's own pace did (issue 47: 20 s at 2.5 until S6).
    outcomes = run_backlog(own_kafka_settings, cases(range(2, 3), TEST_SHAPES), tmp_path, node_members=3,
                           job_members=3, after_end_s=12.0, wall_rate=6.0,
                           finish_nodes=finish_node_members)
    assert_as_offline(outcomes)
