"""Backtest the storage vocabulary (parsing.storage_state) on the lines no reading took, pair by pair.

    python -m tools.storage_backtest POOL ... [--validate-from N] [--show] [--no-firing]

The pools and the halves are tools.grammar_backtest's (its pool reader: the unread fault rows of each
opened pair on the code just before its round). Counted here are the readings the storage vocabulary
adds to the state grammar (a reading whose rule is ``storage_state``: the vocabulary reads only a line the
grammar's own objects and states did not), each as acting (an alert) or recorded (the line's own level is
notice or below), caught right (``storage``, the row's class) or caught wrong. Then its firing, by
tools.grammar_backtest.firing over every healthy row of every open corpus file and every ordinary
whole-log line, kept to the storage vocabulary's readings. And its reach on what the rules already read:
of every open corpus row labelled ``storage``, how many it would read by itself (a general reading of the
vocabulary should read the mined lines too), and of every other fault row, how many it would call storage.
"""

from __future__ import annotations

import json

from faultlens.parsing.state_grammar import Reading
from tools.grammar_backtest import _lines, open_fault_rows, rule_backtest_main


def _storage(reading: Reading | None) -> bool:
    return reading is not None and reading.rule == "storage_state"


def reach(show: bool) -> dict[str, int]:
    """Open corpus fault rows the vocabulary reads by itself, whatever the rules did with them."""
    storage = storage_read = other = other_read = 0
    for path, row, got in open_fault_rows():
        read = _storage(got)
        if row["fault"] == "storage":
            storage += 1
            storage_read += read
        else:
            other += 1
            other_read += read
            if read and show:
                print(json.dumps({"other_class": row["fault"], "file": path.name, "object": got.object,  # type: ignore[union-attr]
                                  "state": got.state, "line": _lines(row)[0][:160]}))  # type: ignore[union-attr]  # fmt: skip
    return {
        "storage_rows": storage,
        "storage_rows_read": storage_read,
        "other_fault_rows": other,
        "other_read_as_storage": other_read,
    }


def main(argv: list[str] | None = None) -> int:
    return rule_backtest_main(argv, __doc__, "storage_state", 47, reach)


if __name__ == "__main__":
    raise SystemExit(main())
