"""The report's `unrecognised_lines` section: the raw log lines a history holds (`kind: line`
events) that look alarming yet no rule takes, as Drain3 templates with counts (parsing.unrecognised).

A template that keeps coming back is a rule to write (parsing/rules.toml format, `--rules FILE`).
The lines are parsed again here, one parser per node and source as the node stage does, so a
record spread over lines (a traceback) is judged whole.
"""

from __future__ import annotations

import functools
from typing import Any

import duckdb

from faultlens.parsing.registry import parser_for
from faultlens.parsing.unrecognised import UnrecognisedMiner

# Raw lines read at most (the newest are dropped past it): a report stays quick on a big history.
MAX_LINES = 200_000


def unrecognised_lines(conn: duckdb.DuckDBPyConnection, limit: int = 10) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT node, source, json_extract_string(data, '$.line') FROM events "
        "WHERE kind = 'line' AND source IN ('kernel', 'nccl') ORDER BY ts LIMIT ?", [MAX_LINES],
    ).fetchall()
    miner = UnrecognisedMiner()
    parsers: dict[tuple[str, str], Any] = {}
    for node, source, line in rows:
        if not isinstance(line, str):
            continue
        parser = parsers.get((node, source))
        if parser is None:
            parser = parsers[(node, source)] = parser_for(source, on_unrecognised=functools.partial(miner.add, source=source))
        parser.feed(line)
    return [t.as_dict() for t in miner.top(limit)]
