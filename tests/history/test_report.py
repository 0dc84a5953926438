"""Report sections on the hand-worked history of tests/history/known.py."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from faultlens.events.topology import Topology
from faultlens.history import queries, report
from faultlens.history.schema import memory_history
from faultlens.history.sink import HistorySink, build_batch
from tests.history import known
from tests.history.known import T0, D


@pytest.fixture
def conn():
    c = memory_history()
    HistorySink(c).write(build_batch(known.records()))
    yield c
    c.close()


@pytest.fixture
def labelled(conn):
    HistorySink(conn).write(build_batch([], labels=known.LABELS))
    return conn


def test_faults_by_class_node_and_day(conn):
    by_class = {r["fault"]: r for r in queries.run(conn, "faults_by_class")}
    assert set(by_class) == {"gpu_lost", "nccl_error", "gpu_memory", "gpu_thermal"}
    assert by_class["nccl_error"]["occurrences"] == 12 and by_class["nccl_error"]["nodes"] == 2
    by_node = {(r["node"], r["fault"]): r["diagnoses"] for r in queries.run(conn, "faults_by_node")}
    assert by_node == {("n0", "gpu_memory"): 1, ("n1", "gpu_lost"): 1, ("n1", "gpu_thermal"): 1,
                       ("n2", "nccl_error"): 1, ("n3", "nccl_error"): 1}
    by_day = {(r["day"], r["fault"]) for r in queries.run(conn, "faults_by_day")}
    day1, day2 = dt.date(2023, 11, 14), dt.date(2023, 11, 15)
    assert by_day == {(day1, "gpu_lost"), (day1, "gpu_memory"), (day1, "nccl_error"), (day2, "gpu_thermal")}


def test_top_nodes(conn):
    top = queries.run(conn, "top_nodes", limit=4)
    # offenders by failures (acting diagnoses), then by all diagnoses, then by name
    assert [r["node"] for r in top] == ["n1", "n2", "n3", "n0"]
    assert top[0]["diagnoses"] == 2 and top[0]["faults"] == ["gpu_lost", "gpu_thermal"] and top[0]["failures"] == 2
    assert top[3]["failures"] == 0 and top[3]["diagnoses"] == 1  # n0's only diagnosis was record-only
    assert top[3]["faults"] is None
    assert [r["node"] for r in queries.run(conn, "top_nodes", limit=2)] == ["n1", "n2"]


def test_detection_latency_percentiles(conn):
    # acting diagnoses' latencies 3, 10, 6 (d3 is record-only) → sorted 3, 6, 10:
    # p50 = 6, p99 = 6 + 0.98 * 4 = 9.92
    lat = queries.run(conn, "detection_latency")[0]
    assert lat["n"] == 3
    assert lat["p50_s"] == pytest.approx(6.0)
    assert lat["p99_s"] == pytest.approx(9.92)
    assert lat["max_s"] == pytest.approx(10.0)
    by_class = {r["fault"]: r for r in queries.run(conn, "detection_by_class")}
    assert set(by_class) == {"gpu_lost", "nccl_error", "gpu_thermal"}
    assert by_class["nccl_error"]["p50_s"] == pytest.approx(10.0) and by_class["gpu_lost"]["n"] == 1


def test_time_to_command(conn):
    # d1 → c1 after 2 s, d2 → c2 after 1 s; d4 (evict) never got a command
    ttc = queries.run(conn, "time_to_command")[0]
    assert ttc["n"] == 2
    assert ttc["p50_s"] == pytest.approx(1.5)
    assert ttc["p99_s"] == pytest.approx(1.99)
    assert ttc["diagnoses_without_command"] == 1


def test_mtbf(conn):
    window = (D + 29.25) - (T0 - 10)  # first event (j1 topology) to last (j2's last step)
    rows = {r["node"]: r for r in queries.run(conn, "mtbf")}
    assert set(rows) == {"n1", "n2", "n3"}  # n0 had only a record-only diagnosis
    assert rows["n1"]["failures"] == 2
    assert rows["n1"]["mtbf_s"] == pytest.approx(window / 2)
    assert rows["n2"]["mtbf_s"] == pytest.approx(window)


def test_over_eviction_from_confirmed_diagnoses(conn):
    ov = queries.run(conn, "over_eviction")[0]
    # evicted {n0, n1, n2, n3}; confirmed (confidence ≥ 0.9, acting) {n1, n2, n3}
    assert ov["basis"] == "confirmed diagnoses"
    assert (ov["evicted_nodes"], ov["faulty_nodes"], ov["healthy_evicted"]) == (4, 3, 1)
    assert ov["ratio"] == pytest.approx(4 / 3)


def test_over_eviction_prefers_labels(labelled):
    ov = queries.run(labelled, "over_eviction")[0]
    # labels blame {n1, n2}: n0 and n3 were evicted although healthy
    assert ov["basis"] == "labels"
    assert (ov["evicted_nodes"], ov["faulty_nodes"], ov["healthy_evicted"]) == (4, 2, 2)
    assert ov["ratio"] == pytest.approx(2.0)


def test_ettr(conn):
    rows = {r["job"]: r for r in queries.run(conn, "ettr")}
    # j1: productive 0..40, 60..80, 95..119 = 84 s over a wall of -10..119 = 129 s
    assert rows["j1"]["productive_s"] == pytest.approx(84.0)
    assert rows["j1"]["wall_s"] == pytest.approx(129.0)
    assert rows["j1"]["ettr"] == pytest.approx(84 / 129)
    assert rows["j1"]["incidents"] == 2  # the record-only diagnosis is not an incident
    # j2: steps go on through the thermal fault, but the second after its onset is lost: 28 / 39
    assert rows["j2"]["ettr"] == pytest.approx(28 / 39)


def test_ettr_caps_running_gaps(conn):
    # with max_gap 0.5 every 1 s step interval counts half: 84 intervals → 42 s
    rows = {r["job"]: r for r in queries.run(conn, "ettr", max_gap=0.5)}
    assert rows["j1"]["productive_s"] == pytest.approx(42.0)


def test_incidents(conn):
    inc = {r["diagnosis_id"]: r for r in queries.run(conn, "incidents")}
    assert set(inc) == {"d1", "d2", "d4"}
    assert inc["d1"]["command"] == "evict" and inc["d1"]["to_command_s"] == pytest.approx(2.0)
    assert inc["d1"]["recovered_at"] == T0 + 60 and inc["d1"]["recovery_s"] == pytest.approx(20.0)
    assert inc["d2"]["recovery_s"] == pytest.approx(15.0)
    assert inc["d4"]["command"] is None and inc["d4"]["recovery_s"] == pytest.approx(7.0)


def test_event_faults_and_summary(conn):
    assert queries.run(conn, "event_faults") == [
        {"source": "kernel", "kind": "gpu_lost", "fault": "gpu_lost", "events": 1, "nodes": 1}]
    s = queries.run(conn, "summary")[0]
    assert (s["events"], s["diagnoses"], s["commands"], s["labels"], s["jobs"]) == (119, 4, 2, 0, 2)  # j1: 85 steps + 3, j2: 30 steps + 1


def test_json_lines_have_one_section_each(conn):
    lines = [orjson.loads(line) for line in report.json_lines(report.build(conn))]
    assert [line["section"] for line in lines] == list(queries.REPORT_SECTIONS)
    by = {line["section"]: line for line in lines}
    assert by["detection_latency"]["p50_s"] == pytest.approx(6.0)
    assert by["faults_by_day"]["rows"][0]["day"] == "2023-11-14"
    assert {r["job"] for r in by["ettr"]["rows"]} == {"j1", "j2"}


def test_rich_render_shows_sections(conn, tmp_path):
    out = tmp_path / "report.txt"
    with open(out, "w") as fh:
        report.render(report.build(conn), file=fh)
    text = out.read_text()
    assert "Faults by class" in text and "ETTR per job" in text and "gpu_thermal" in text
    # the wide commands section shows its key columns only (--json has them all)
    assert "job restarted" in text and "no restart recorded" in text and "has_diagnosis" not in text


def test_unknown_query_is_a_clear_error(conn):
    with pytest.raises(KeyError, match="unknown query 'nope'"):
        queries.run(conn, "nope")


def test_label_detection(labelled):
    det = queries.run(labelled, "label_detection")[0]
    # gpu_lost on n1 at 40 → d1 at 43 (3 s); nccl_error on n2 at 80 → d2 at 90 (10 s)
    assert (det["labels"], det["detected"], det["missed"]) == (2, 2, 0)
    assert det["p50_s"] == pytest.approx(6.5) and det["p99_s"] == pytest.approx(9.93)
    late = {"job": "j1", "fault": "nic", "nodes": ["n3"], "ranks": [], "onset": T0 + 100}
    HistorySink(labelled).write(build_batch([], labels=[late]))  # nothing diagnosed n3 after 100
    det = queries.run(labelled, "label_detection")[0]
    assert (det["labels"], det["detected"], det["missed"]) == (3, 2, 1)


def test_inspection_candidates(conn):
    rows = queries.run(conn, "inspection_candidates")
    assert [(r["node"], r["hardware_failures"], r["faults"]) for r in rows] == [("n1", 2, ["gpu_lost", "gpu_thermal"])]
    HistorySink(conn).write(build_batch([Diagnosis(
        id="d5", job="j1", ts=T0 + 200, onset=T0 + 199, fault="gpu_reset_required", action="inspect_hardware",
        nodes=("n0",))]))
    assert [r["node"] for r in queries.run(conn, "inspection_candidates")] == ["n1", "n0"]


def test_timeline_spans_merge_marks_into_state_changes(conn):
    spans = [(r["state"], r["ts"] - T0, r["next_ts"] - T0) for r in queries.run(conn, "timeline_spans") if r["job"] == "j1"]
    assert spans == [("restarting", -10, 0), ("running", 0, 40), ("down", 40, 45), ("restarting", 45, 60),
                     ("running", 60, 80), ("down", 80, 91), ("restarting", 91, 95), ("running", 95, 119)]


def test_a_jobs_end_closes_its_wall_time_until_it_starts_again():
    # j3 runs 0..29, its launcher says it finished at 30.5; resubmitted an hour later it starts at
    # 3590, steps 3600..3629 and finishes at 3630.5. The hour between is no time of the job's: not
    # down, not wall time (without the end mark its ETTR read 61 / 3640.5 s).
    c = memory_history()
    ends = [Envelope(ts=T0 + t, job="j3", node="-", source="job", kind="end", id=f"j3-end-{t}",
                     data={"reason": "finished", "attempt": 1, "command_id": None, "nodes": known.NODES})
            for t in (30.5, 3630.5)]
    events = [known._topology("j3", T0 - 10), *known._steps("j3", T0, T0 + 29),
              Topology.grid(known.NODES, 2, 2, 2, 2).to_event("j3", T0 + 3590, event_id="j3-topology-2"), *known._steps("j3", T0 + 3600, T0 + 3629),
              *ends]
    HistorySink(c).write(build_batch(sorted(events, key=lambda e: e.ts)))
    [row] = queries.run(c, "ettr")
    # productive: 29 one-second intervals and the last step's 1.5 s up to the end, twice
    assert row["productive_s"] == pytest.approx(61.0)
    assert row["wall_s"] == pytest.approx((3630.5 + 10) - (3590 - 30.5))
    assert row["ettr"] == pytest.approx(61.0 / 81.0)
    states = [(r["state"], r["reason"]) for r in queries.run(c, "timeline") if r["state"] == "ended"]
    assert states == [("ended", "end: finished")] * 2
    c.close()
