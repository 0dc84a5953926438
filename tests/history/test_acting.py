"""Stack requests and record-only findings are not failures: the measures count acting diagnoses.

Every figure here is the hand-worked one of tests/history/test_report.py (known.py alone), now
with two stack requests naming all four nodes and one more record-only finding added.
"""

from __future__ import annotations

import pandas as pd
import pytest

from faultlens.history import queries
from faultlens.history.sink import HistorySink, build_batch
from tests.history import known
from tests.history.known import T0


def test_kinds_are_counted_apart(conn):
    assert queries.kind_counts(conn) == {"acting": 3, "evidence_request": 2, "record_only": 2}
    by_class = {r["fault"]: r for r in queries.run(conn, "faults_by_class")}
    hang = by_class["job_hang"]
    assert (hang["diagnoses"], hang["acting"], hang["evidence_requests"], hang["record_only"]) == (2, 0, 2, 0)
    assert hang["nodes"] == 0  # a request blames nobody
    assert (by_class["gpu_memory"]["record_only"], by_class["gpu_memory"]["nodes"]) == (2, 0)


def test_a_request_is_not_a_failure_of_every_node(conn):
    by_node = {(r["node"], r["fault"]): (r["acting"], r["evidence_requests"]) for r in queries.run(conn, "faults_by_node")}
    assert all(by_node[(n, "job_hang")] == (0, 2) for n in known.NODES)
    assert by_node[("n1", "gpu_lost")] == (1, 0)
    assert {r["node"]: r["failures"] for r in queries.run(conn, "mtbf")} == {"n1": 2, "n2": 1, "n3": 1}
    top = queries.run(conn, "top_nodes")
    assert [(r["node"], r["failures"]) for r in top] == [("n1", 2), ("n2", 1), ("n3", 1), ("n0", 0)]
    assert top[1]["diagnoses"] == 4  # n2: nccl_error, two requests, one record-only finding


def test_incidents_latency_and_commands_count_acting_diagnoses(conn):
    assert {r["diagnosis_id"] for r in queries.run(conn, "incidents")} == {"d1", "d2", "d4"}
    lat = queries.run(conn, "detection_latency")[0]
    assert (lat["n"], lat["p50_s"]) == (3, pytest.approx(6.0))
    ttc = queries.run(conn, "time_to_command")[0]
    assert (ttc["n"], ttc["diagnoses_without_command"]) == (2, 1)  # c3 answers a request, not a failure
    assert queries.run(conn, "inspection_candidates")[0]["node"] == "n1"


def test_mttr_by_class(conn):
    rows = {r["fault"]: r for r in queries.run(conn, "mttr_by_class")}
    # recovery (onset → first running mark after the first command): d1 20 s, d2 15 s, d4 7 s
    assert rows["gpu_lost"]["mttr_s"] == pytest.approx(20.0) and rows["gpu_lost"]["recovered"] == 1
    assert rows["nccl_error"]["mttr_s"] == pytest.approx(15.0)
    assert rows["gpu_thermal"]["detection_p50_s"] == pytest.approx(6.0)
    assert "job_hang" not in rows


def test_command_outcomes(conn):
    rows = {r["command_id"]: r for r in queries.run(conn, "command_outcomes")}
    assert rows["c1"]["outcome"] == "job restarted" and rows["c1"]["to_restart_s"] == pytest.approx(5.0)
    assert (rows["c1"]["nodes_out"], rows["c1"]["nodes_in"]) == (["n1"], ["s0"])
    assert rows["c2"]["outcome"] == "no restart recorded"  # nothing names c2 in a job/restart event
    assert rows["c3"]["outcome"] == "stack dumps received"
    assert (rows["c3"]["usable_dumps"], rows["c3"]["dump_nodes"]) == (1, 2)
    assert rows["c3"]["fault"] == "job_hang" and all(r["has_diagnosis"] for r in rows.values())


def test_wrongly_blamed_against_labels(conn):
    HistorySink(conn).write(build_batch([], labels=known.LABELS))
    rows = queries.run(conn, "wrongly_blamed")
    # labels blame n1 and n2; c2 evicted n2, n3 and n0 for the nccl_error on pp:1
    assert [(r["node"], r["command_id"], r["fault"], r["group"]) for r in rows] == [
        ("n0", "c2", "nccl_error", "pp:1"), ("n3", "c2", "nccl_error", "pp:1")]
    assert rows[0]["issued_at"] == T0 + 91 and rows[0]["basis"] == "labels"


def test_frame_is_a_dataframe_of_the_same_rows(conn):
    df = queries.frame(conn, "faults_by_node")
    assert isinstance(df, pd.DataFrame)
    assert len(df) == len(queries.run(conn, "faults_by_node"))
    assert int(df["evidence_requests"].sum()) == 8  # two requests × four nodes
    assert list(queries.frame(conn, "top_nodes", limit=2)["node"]) == ["n1", "n2"]
