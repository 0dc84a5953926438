"""Backtest the reading of a program's own failure frame (parsing.own_failure) on the lines no reading took, pair by pair.

    python -m tools.own_failure_backtest POOL ... [--validate-from N] [--show] [--no-firing]

The pools and the halves are tools.grammar_backtest's (its pool reader: the unread fault rows of each
opened pair on the code just before its round). Counted here are the readings the frames add to the state
grammar (a reading whose rule is ``own_failure``: read only on a job's stream, for a line the grammar's
objects and the storage vocabulary did not take), each as acting (an alert) or recorded (the line's own
level is notice or below), caught right (``user_code``, the row's class) or caught wrong. Then its firing,
by tools.grammar_backtest.firing over every healthy row of every open corpus file and every ordinary
whole-log line, kept to the frames' readings. And its reach on what the rules already read: of every open
corpus row labelled ``user_code``, how many the frames would read by themselves, and of every other fault
row, how many they would call ``user_code``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from faultlens.parsing.state_grammar import Reading
from tools.grammar_backtest import _lines, open_fault_rows, rule_backtest_main


def _own(reading: Reading | None) -> bool:
    return reading is not None and reading.rule == "own_failure"


def reach(show: bool) -> dict[str, Any]:
    """Open corpus fault rows the frames read by themselves, whatever the rules did with them."""
    mine = mine_read = other = 0
    wrong: Counter[str] = Counter()
    for path, row, got in open_fault_rows():
        fault = row["fault"]
        read = _own(got)
        if fault == "user_code":
            mine += 1
            mine_read += read
        else:
            other += 1
            if read:
                wrong[fault] += 1
                if show:
                    print(json.dumps({"other_class": fault, "file": path.name, "object": got.object,  # type: ignore[union-attr]
                                      "line": _lines(row)[0][:160]}))  # fmt: skip
    return {"user_code_rows": mine, "user_code_rows_read": mine_read, "other_fault_rows": other,
            "other_read_as_user_code": sum(wrong.values()), "by_class": dict(wrong.most_common())}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return rule_backtest_main(argv, __doc__, "own_failure", 59, reach)


if __name__ == "__main__":
    raise SystemExit(main())
