"""Backtest a barrier or collective that timed out (parsing.group_timeout): every row with the reading and without it.

    python -m tools.group_timeout_backtest POOL ... [--validate-from N] [--show] [--no-firing]

The reading can take a line another reading (the line model's guess, the state grammar) gave a class, so it is
counted as tools.exception_subject_backtest counts its reading: every fault row of each opened pair's batches scored by
the whole parser with it and with ``group_timeout.group_timeout`` answering None; per pair rows gained, right rows lost,
rows still given a wrong class, and of the pool's misses how many it makes right; then every healthy row of every open
corpus file and the whole logs, acting events with and without it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from faultlens.parsing import group_timeout
from tools.exception_subject_backtest import KEYS, backtest_pair, firing
from tools.grammar_backtest import halves_main


@contextmanager
def without_reading() -> Iterator[None]:
    """The trainer parser as it was before the reading: no line is read as a group's timeout."""
    kept = group_timeout.group_timeout
    group_timeout.group_timeout = lambda msg, raw, rank, extra: None  # type: ignore[assignment]
    try:
        yield
    finally:
        group_timeout.group_timeout = kept  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    return halves_main(argv, __doc__, 63, lambda pool, show: backtest_pair(pool, show, without_reading), KEYS,
                       lambda show: [{"firing": True, **firing(without_reading)}])  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
