"""The notebooks run headless (nbclient) against a history built from a simulated trace.

The kernel is pinned to this interpreter (the project's venv): a kernelspec written into a
temporary JUPYTER_PATH, which Jupyter searches before the user's and the system's kernels.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from faultlens.history.loader import load_trace
from faultlens.history.schema import open_history
from faultlens.history.sink import HistorySink, build_batch
from tests.history import known
from tests.progress import Stalled, cpu_ticks, wait_until

if TYPE_CHECKING:  # imported when a notebook runs: each xdist worker collects this file, one runs it
    import nbformat
    from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "faultlens-test-venv"
STALL_S = 120.0  # the kernel computed and printed nothing for this long: stuck, not slow


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
    """Run the notebook; return it and its text: printed lines and the plain-text form of displayed DataFrames."""
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_path))
    monkeypatch.setenv("FAULTLENS_DB", str(db))
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print('KERNEL', sys.executable)"))
    _run_watched(NotebookClient(nb, kernel_name=KERNEL, timeout=None, resources={"metadata": {"path": str(NOTEBOOKS)}}),
                 nb, name)
    parts = []
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        for o in c.outputs:
            if o.output_type == "stream":
                parts.append(o.get("text", ""))
            elif o.output_type in ("display_data", "execute_result") and "text/html" in o.get("data", {}):
                parts.append(o["data"].get("text/plain", ""))  # a DataFrame (figures have no HTML form)
    text = "\n".join(parts)
    assert f"KERNEL {sys.executable}" in text
    return nb, text


def _run_watched(client: NotebookClient, nb, name: str) -> None:
    """``client.execute()``, waited for while the kernel moves (its CPU clock, the outputs its cells
    added), not a fixed bound per cell that a busy machine outruns (issue 47). A stalled kernel is
    killed, which ends the execution in its thread."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            client.execute()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread below
            outcome.append(exc)

    def kernel_pid() -> int | None:
        return getattr(getattr(client.km, "provisioner", None), "pid", None) if client.km is not None else None

    def progress() -> tuple[int, int]:
        pid = kernel_pid()
        return (cpu_ticks(pid) if pid else 0), sum(len(c.get("outputs", ())) for c in nb.cells)

    thread = threading.Thread(target=run, name=f"notebook-{name}", daemon=True)
    thread.start()
    try:
        wait_until(lambda: outcome, progress=progress, stall_s=STALL_S, limit_s=280, what=f"notebook {name}")
    except Stalled:
        if (pid := kernel_pid()) is not None:
            os.kill(pid, signal.SIGKILL)
        raise
    if outcome[0] is not None:
        raise outcome[0]


def _pngs(nb) -> int:
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if o.output_type == "display_data" and "image/png" in o.get("data", {}))


def _tables(nb) -> int:
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if o.output_type == "display_data" and "<table" in o.get("data", {}).get("text/html", ""))


def _db_counts(db: Path, sql: str) -> list[tuple]:
    conn = open_history(db, read_only=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _row(text: str, *cells) -> bool:
    """Whether a DataFrame row holds these cells in this order (its index first)."""
    pattern = r"^\s*\d+\s+" + r"\s+".join(re.escape(str(c)) for c in cells) + r"(\s|$)"
    return re.search(pattern, text, re.M) is not None


def test_fleet_overview(sim_db, kernel_path, monkeypatch):
    nb, text = _execute("fleet_overview", sim_db, kernel_path, monkeypatch)
    (total,) = _db_counts(sim_db, "SELECT count(*) FROM diagnoses")[0]
    assert f"{total} diagnoses (" in text
    kinds = "count(*) FILTER (WHERE action NOT IN ('none', 'capture_stacks')), " \
            "count(*) FILTER (WHERE action = 'capture_stacks'), count(*) FILTER (WHERE action = 'none')"
    for fault, acting, requests, record in _db_counts(sim_db, f"SELECT fault, {kinds} FROM diagnoses GROUP BY fault"):
        assert _row(text, fault, acting, requests, record), fault
    # a pandas bar chart of classes by kind, classes over time, heat map, latency histogram
    assert _pngs(nb) == 4
    assert _tables(nb) == 4


def test_node_reliability(sim_db, kernel_path, monkeypatch):
    nb, text = _execute("node_reliability", sim_db, kernel_path, monkeypatch)
    assert _row(text, "n1", 2, "[gpu_lost, gpu_thermal]")  # inspection: the hand-worked history's n1
    assert _row(text, "labels", 4)  # over-eviction judged against the trace's and the hand-worked labels
    assert _pngs(nb) == 2  # MTBF, failures per node


def test_job_timeline(sim_db, kernel_path, monkeypatch):
    nb, text = _execute("job_timeline", sim_db, kernel_path, monkeypatch)
    assert _row(text, "j1", "129.00", "84.00")  # ETTR: wall 129 s, 84 s productive
    assert "job-sim" in text
    assert _row(text, "j1", "gpu_lost", "[n1]", "3.00", "evict", "2.00", "20.00")  # the incident of d1
    assert _row(text, "j1", "evict", "[n1]", "gpu_lost", "job restarted", "5.00")  # c1, obeyed 5 s later
    assert _pngs(nb) == 3  # ETTR bars, timelines, MTTR
