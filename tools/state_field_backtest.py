"""Backtest a network link's state printed as a field whose value says it is down (parsing.state_field), pair by pair.

    python -m tools.state_field_backtest POOL ... [--validate-from N] [--show] [--no-firing]

The pools and the halves are tools.grammar_backtest's (its pool reader: the unread fault rows of each opened
pair on the code just before its round). Counted here are the readings the state field adds to the state
grammar (a reading whose rule is ``state_field``: a line the grammar's sentences did not take), each as acting
(an alert) or recorded (the line's own level is notice or below), caught right (the row's class) or caught
wrong. Then its firing, by tools.grammar_backtest.firing over every healthy row of every open corpus file and
every ordinary whole-log line, kept to its readings. And its reach on what the rules already read: of every
open corpus fault row, how many it reads by itself, with the row's class or another (by the row's class).
"""

from __future__ import annotations

from functools import partial

from tools.grammar_backtest import class_reach, rule_backtest_main

RULE = "state_field"


def main(argv: list[str] | None = None) -> int:
    return rule_backtest_main(argv, __doc__, RULE, 63, partial(class_reach, RULE))


if __name__ == "__main__":
    raise SystemExit(main())
