"""`faultlens report`'s unrecognised_lines section: the history's raw alarming lines no rule took,
as templates with counts; recognised lines never show there."""

from __future__ import annotations

import json

from faultlens.history import report
from faultlens.history.schema import memory_history

# Public GitHub file, search-index id 28829096094 (a PCIe DPC/AER report on LKML).
LINES = ["[  188.369811] pci 0000:69:00.0: AER: can't recover (no error_detected callback)",
         "[  188.369812] pci 0000:6a:00.0: AER: can't recover (no error_detected callback)",
         # kubernetes/node-problem-detector test/kernel_log_generator/problems/null_pointer: a rule's
         "BUG: unable to handle kernel NULL pointer dereference at 0000000000000078"]


def test_report_mines_the_raw_lines_no_rule_took():
    conn = memory_history()
    for i, line in enumerate(LINES):
        conn.execute("INSERT INTO events (id, ts, job, node, source, kind, data) VALUES (?, ?, 'j1', 'n1', 'kernel', 'line', ?)",
                     [f"e{i}", 1_800_000_000.0 + i, json.dumps({"line": line})])
    sections = report.build(conn)
    [row] = sections["unrecognised_lines"]
    assert row["count"] == 2 and "can't recover" in row["template"] and row["source"] == "kernel"


def test_empty_history_has_an_empty_section():
    assert report.build(memory_history())["unrecognised_lines"] == []
