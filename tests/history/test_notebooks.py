"""The notebooks run headless (nbclient) against a history built from a simulated trace.

The kernel is pinned to this interpreter (the project's venv): a kernelspec written into a
temporary JUPYTER_PATH, which Jupyter searches before the user's and the system's kernels.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from history.loader import load_trace
from history.schema import open_history
from history.sink import HistorySink, build_batch
from tests.history import known

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "faultlens-test-venv"


@pytest.fixture(scope="module")
def kernel_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "faultlens venv", "language": "python",
    }))
    return root


@pytest.fixture(scope="module")
def sim_db(sim_trace, tmp_path_factory):
    db = tmp_path_factory.mktemp("nbdb") / "sim.duckdb"
    conn = open_history(db, create=True)
    load_trace(sim_trace, HistorySink(conn), progress=False)
    # the simulated run has no remediation: add the hand-worked history's commands and diagnoses too
    HistorySink(conn).write(build_batch(known.records()))
    conn.close()
    return db


def _execute(name: str, db: Path, kernel_path: Path, monkeypatch) -> tuple[nbformat.NotebookNode, str]:
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_path))
    monkeypatch.setenv("FAULTLENS_DB", str(db))
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print('KERNEL', sys.executable)"))
    NotebookClient(nb, kernel_name=KERNEL, timeout=120, resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                     if o.output_type == "stream")
    assert f"KERNEL {sys.executable}" in text
    return nb, text


def _pngs(nb) -> int:
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if o.output_type == "display_data" and "image/png" in o.get("data", {}))


def _db_counts(db: Path, sql: str) -> list[tuple]:
    conn = open_history(db, read_only=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_fleet_overview(sim_db, kernel_path, monkeypatch):
    nb, text = _execute("fleet_overview", sim_db, kernel_path, monkeypatch)
    (total,) = _db_counts(sim_db, "SELECT count(*) FROM diagnoses")[0]
    assert f"{total} diagnoses" in text
    for fault, n in _db_counts(sim_db, "SELECT fault, count(*) FROM diagnoses GROUP BY fault"):
        assert f"fault={fault}  diagnoses={n}" in text
    assert _pngs(nb) == 3  # classes over time, heat map, latency histogram


def test_node_reliability(sim_db, kernel_path, monkeypatch):
    nb, text = _execute("node_reliability", sim_db, kernel_path, monkeypatch)
    assert "node=n1  hardware_failures=2" in text  # the hand-worked history's n1: gpu_lost + gpu_thermal
    assert "basis=labels" in text
    assert _pngs(nb) == 1


def test_job_timeline(sim_db, kernel_path, monkeypatch):
    nb, text = _execute("job_timeline", sim_db, kernel_path, monkeypatch)
    assert "job=j1  wall_s=129.0  productive_s=84.0" in text
    assert "job=job-sim" in text
    assert "fault=gpu_lost  nodes=['n1']  detection_s=3.0  command=evict  to_command_s=2.0  recovery_s=20.0" in text
    assert _pngs(nb) == 1
