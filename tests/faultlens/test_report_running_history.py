"""`faultlens report` on a history another process holds open (issue 58): DuckDB lets no second
process open the file, not even to read, so `report` beside a running `faultlens up` refused
("in use by another process"). It now reports a copy taken at that moment, and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.history.answered import write_history
from tests.progress import run_watched

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLD = """
import sys, time
from faultlens.history.schema import open_history
c = open_history(sys.argv[1])  # a writer's connection, as `faultlens up` keeps one
c.execute("CREATE TABLE IF NOT EXISTS held (a INT)")
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def test_report_reads_a_history_a_running_writer_holds(tmp_path):
    db = tmp_path / "history.duckdb"
    write_history(db, [])
    env = {**os.environ, "PYTHONPATH": ROOT}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        scratch = tmp_path / "tmp"
        scratch.mkdir()
        out = run_watched([sys.executable, "-m", "faultlens", "report", "--db", str(db), "--json"],
                          env={**env, "TMPDIR": str(scratch)}, stall_s=120, cpu=True, limit_s=280)
    finally:
        holder.stdin.close()
        holder.wait(60)
    assert out.returncode == 0, out.stderr
    assert "in use" in out.stderr and "reporting a copy" in out.stderr
    summary = json.loads(out.stdout.splitlines()[0])
    assert summary["section"] == "summary" and summary["events"] > 0 and summary["commands"] > 0
    assert not list(scratch.iterdir())  # the copy is gone with the report
