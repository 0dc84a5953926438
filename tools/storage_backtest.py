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

import argparse
import json
from pathlib import Path

from faultlens.parsing.line_corpus import open_files
from faultlens.parsing.state_grammar import Reading
from tools.grammar_backtest import RULE_HALF_KEYS, _lines, backtest_rule_pool, firing, print_by_half, reading_of


def _storage(reading: Reading | None) -> bool:
    return reading is not None and reading.rule == "storage_state"


def reach(show: bool) -> dict[str, int]:
    """Open corpus fault rows the vocabulary reads by itself, whatever the rules did with them."""
    storage = storage_read = other = other_read = 0
    for path in open_files():
        for text in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(text) if text.strip() else {}
            fault = row.get("fault")
            if not fault:
                continue
            got = reading_of(row)
            read = _storage(got)
            if fault == "storage":
                storage += 1
                storage_read += read
            else:
                other += 1
                other_read += read
                if read and show:
                    print(json.dumps({"other_class": fault, "file": path.name, "object": got.object,  # type: ignore[union-attr]
                                      "state": got.state, "line": _lines(row)[0][:160]}))  # type: ignore[union-attr]  # fmt: skip
    return {
        "storage_rows": storage,
        "storage_rows_read": storage_read,
        "other_fault_rows": other,
        "other_read_as_storage": other_read,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pools", nargs="*", type=Path)
    ap.add_argument("--validate-from", type=int, default=47, help="first batch of the validation half")
    ap.add_argument("--show", action="store_true", help="print each reading")
    ap.add_argument("--no-firing", action="store_true", help="skip the firing and reach counts")
    args = ap.parse_args(argv)
    print_by_half(args.pools, args.validate_from, lambda pool: backtest_rule_pool(pool, "storage_state", args.show),
                   RULE_HALF_KEYS)
    if not args.no_firing:
        print(json.dumps({"firing": True, **firing(args.show, keep=_storage)}))
        print(json.dumps({"reach": True, **reach(args.show)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
