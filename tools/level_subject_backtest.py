"""Backtest the reading of a line's own error level by the subject it names (parsing.level_subject), pair by pair.

    python -m tools.level_subject_backtest POOL ... [--validate-from N] [--show] [--no-firing]

The pools and the halves are tools.grammar_backtest's (its pool reader: the unread fault rows of each opened
pair on the code just before its round). Counted here are the readings the level adds to the state grammar
(a reading whose rule is ``level_subject``: a line at its own error or fatal level, naming a subject, that the
grammar's states, the storage vocabularies, the frames and the accelerator words did not take), each as acting
(an alert) or recorded (the line's own level is notice or below), caught right (the row's class) or wrong. Then
its firing, by tools.grammar_backtest.firing over every healthy row of every open corpus file and every ordinary
whole-log line, kept to these readings; and its reach, tools.grammar_backtest.class_reach: of every open corpus
fault row, how many it reads by itself, with the row's class or another, whatever the rules did with them.
"""

from __future__ import annotations

from tools.grammar_backtest import class_reach, rule_backtest_main


def main(argv: list[str] | None = None) -> int:
    return rule_backtest_main(argv, __doc__, "level_subject", 63, lambda show: class_reach("level_subject", show))


if __name__ == "__main__":
    raise SystemExit(main())
