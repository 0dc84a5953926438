"""The fault rates a history gives the what-if model count each machine for the time it was watched.

An 8-node job that evicted machines and took standbys counted 18 "nodes" for its whole span before:
every machine that ever appeared, for the whole history, and the job's own records (node '-') as one.
"""

from __future__ import annotations

import pytest

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.history.queries import run
from faultlens.history.schema import open_history
from faultlens.history.sink import HistorySink, build_batch

T0, DAY = 1_699_920_000.0, 86_400.0


def beat(node: str, ts: float) -> Envelope:
    return Envelope(ts=ts, job="j", node=node, source="heartbeat", kind="beat", data={"seq": int(ts)})


def test_a_machine_counts_from_its_first_event_to_its_last_and_the_job_records_not_at_all(tmp_path):
    records = [beat("n0", T0), beat("n0", T0 + DAY),          # there the whole day
               beat("n1", T0), beat("n1", T0 + DAY / 2),      # evicted at noon
               beat("s0", T0 + DAY / 2), beat("s0", T0 + DAY),  # the standby that took its place
               Envelope(ts=T0 - DAY, job="j", node="-", source="job", kind="restart",
                        data={"reason": "an earlier attempt", "nodes_out": [], "nodes_in": []}),
               Diagnosis(id="d", job="j", ts=T0 + DAY / 2, onset=T0 + DAY / 2 - 5, fault="gpu_lost", action="evict",
                         nodes=("n1",), confidence=1.0)]
    conn = open_history(tmp_path / "h.duckdb", create=True)
    HistorySink(conn).write(build_batch(records))
    (row,) = run(conn, "fault_rates")
    assert (row["fault"], row["faults"], row["nodes"]) == ("gpu_lost", 1, 3)
    assert row["node_days"] == pytest.approx(2.0)  # 1 + 1/2 + 1/2, not 3 machines x 2 days of span
    assert row["rate_per_node_day"] == pytest.approx(0.5)
    assert row["days"] == pytest.approx(2.0)  # the span still reaches back to the job's first record
