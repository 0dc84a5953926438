"""The fleet record in the history (history.sink `machines`, queries `machines` / `lemons`) and the
HTML report's per-machine table with the lemons."""

from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.fleet_record import MachineRecord
from faultlens.history.queries import run
from faultlens.history.schema import memory_history
from faultlens.history.sink import HistorySink, build_batch
from faultlens.remediation.fleet import Fleet
from tests.history.report_page import render

T0 = 1_767_225_600.0


def d(job, node, fault, ts, action="evict"):
    return Diagnosis(job=job, ts=ts, onset=ts, fault=fault, action=action, nodes=(node,), confidence=0.95)


def test_lemon_machines_table_has_mtbf_incidents_state_and_the_lemons_section():
    fleet = Fleet()
    diagnoses = [d("a", "n1", "nvlink", T0), d("b", "n1", "nvlink", T0 + 7200), d("a", "n2", "user_code", T0 + 60, "rollback")]
    for x in diagnoses:
        fleet.observe_diagnosis(x, x.ts)
    conn = memory_history()
    sink = HistorySink(conn)
    older = MachineRecord.from_dict(fleet.record("n1").to_dict())
    older.lemons.clear()
    older.updated = T0
    sink.write(build_batch([*diagnoses, older, fleet.record("n1"), fleet.record("n2"), older]))
    rows = {r["node"]: r for r in run(conn, "machines")}
    assert rows["n1"]["state"] == "hardware_inspection"  # the older record delivered later did not win
    assert (rows["n1"]["incidents"], rows["n1"]["jobs"], rows["n1"]["counted"]) == (2, 2, 2)
    assert rows["n1"]["mtbf_s"] == 3600.0  # the 7,200 s window over its two failures
    assert rows["n2"]["state"] == "in_service" and rows["n2"]["counted"] == 0
    assert list(rows)[0] == "n1"  # lemons first
    (lemon,) = run(conn, "lemons")
    assert lemon["node"] == "n1" and lemon["lemon_rule"] == "repeat:nvlink" and len(lemon["lemon_diagnoses"]) == 2
    page = render(conn, generated_at=T0)
    assert 'id="machines"' in page and "repeat:nvlink" in page and "hardware_inspection" in page


def test_lemon_history_rejects_nothing_good_and_keeps_one_row_per_machine():
    conn = memory_history()
    fleet = Fleet()
    fleet.observe_diagnosis(d("a", "n3", "gpu_lost", T0), T0)
    batch = build_batch([fleet.record("n3"), fleet.record("n3")])
    assert not batch.rejected
    HistorySink(conn).write(batch)
    HistorySink(conn).write(build_batch([fleet.record("n3")]))
    assert conn.execute("SELECT count(*) FROM machines").fetchone()[0] == 1
