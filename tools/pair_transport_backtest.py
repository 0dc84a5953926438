"""Backtest a collective library's pair transport that failed (parsing.errors' ``_PAIR_TRANSPORT``): every row with
the reading and without it.

    python -m tools.pair_transport_backtest POOL ... [--validate-from N] [--show] [--no-firing]

Counted as tools.exception_subject_backtest counts its reading (a reading can move a row another reading gave a class):
every fault row of each opened pair's batches scored by the whole parser with it and with the reading's words
matching nothing; per pair rows gained, right rows lost, rows still given a wrong class, and of the pool's misses how
many it makes right; then every healthy row of every open corpus file and the whole logs, acting events with and
without it.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

from faultlens.parsing import errors
from tools.exception_subject_backtest import KEYS, backtest_pair, firing
from tools.grammar_backtest import halves_main


@contextmanager
def without_reading() -> Iterator[None]:
    """NCCL's error words as they were before the reading: the pair transport's words match nothing."""
    kept = errors._PAIR_TRANSPORT
    errors._PAIR_TRANSPORT = re.compile(r"(?!)")
    try:
        yield
    finally:
        errors._PAIR_TRANSPORT = kept


def main(argv: list[str] | None = None) -> int:
    return halves_main(argv, __doc__, 63, lambda pool, show: backtest_pair(pool, show, without_reading), KEYS,
                       lambda show: [{"firing": True, **firing(without_reading)}])  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
