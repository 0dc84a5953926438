"""Backtest the reading of an accelerator's own state words (parsing.accelerator_state) on the lines no reading took, pair by pair.

    python -m tools.accelerator_backtest POOL ... [--validate-from N] [--show] [--no-firing]

The pools and the halves are tools.grammar_backtest's (its pool reader: the unread fault rows of each
opened pair on the code just before its round). Counted here are the readings the accelerator statements
add to the state grammar (a reading whose rule is ``accelerator_state``: a line the grammar's objects and
the storage vocabulary did not take), each as acting (an alert) or recorded (the line's own level is notice
or below), caught right (the row's class) or caught wrong. Then its firing, by tools.grammar_backtest.firing
over every healthy row of every open corpus file and every ordinary whole-log line, kept to its readings.
And its reach on what the rules already read: of every open corpus fault row, how many it reads by itself,
with the row's class or another (by the row's class).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from tools.grammar_backtest import _lines, open_fault_rows, rule_backtest_main

RULE = "accelerator_state"


def reach(show: bool) -> dict[str, Any]:
    """Open corpus fault rows the statements read by themselves, whatever the rules did with them."""
    rows = 0
    right: Counter[str] = Counter()
    wrong: Counter[str] = Counter()
    for path, row, got in open_fault_rows():
        rows += 1
        if got is None or got.rule != RULE:
            continue
        fault = row["fault"]
        (right if got.fault == fault else wrong)[fault] += 1
        if show and got.fault != fault:
            print(json.dumps({"other_class": fault, "got": got.fault, "file": path.name, "object": got.object,
                              "line": _lines(row)[0][:160]}))  # fmt: skip
    return {"fault_rows": rows, "read_right": sum(right.values()), "read_wrong": sum(wrong.values()),
            "right_by_class": dict(right.most_common()), "wrong_by_class": dict(wrong.most_common())}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return rule_backtest_main(argv, __doc__, RULE, 63, reach)


if __name__ == "__main__":
    raise SystemExit(main())
