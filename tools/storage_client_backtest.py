"""Backtest a user-space storage client's word that an operation on its storage failed (parsing.storage_client), pair by pair.

    python -m tools.storage_client_backtest POOL ... [--validate-from N] [--show] [--no-firing]

The pools and the halves are tools.grammar_backtest's (its pool reader: the unread fault rows of each
opened pair on the code just before its round). Counted here are the readings the storage-client statements
add to the state grammar (a reading whose rule is ``storage_client``: a line the grammar's objects and the
storage vocabulary did not take), each as acting (an alert) or recorded (the line's own level is notice or
below), caught right (``storage``, the row's class) or caught wrong. Then its firing, by
tools.grammar_backtest.firing over every healthy row of every open corpus file and every ordinary whole-log
line, kept to its readings. And its reach on what the rules already read: of every open corpus fault row, how
many it reads by itself, as storage or as another class (by the row's class).
"""

from __future__ import annotations

from functools import partial

from tools.grammar_backtest import class_reach, rule_backtest_main

RULE = "storage_client"


def main(argv: list[str] | None = None) -> int:
    return rule_backtest_main(argv, __doc__, RULE, 64, partial(class_reach, RULE))


if __name__ == "__main__":
    raise SystemExit(main())
