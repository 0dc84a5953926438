"""Backtest a generic exception's subject (parsing.exception_subject): every row with the reading and without it.

    python -m tools.exception_subject_backtest POOL ... [--validate-from N] [--show] [--no-firing]

A reading that changes the class of a line already read can move a right row to a wrong one, so it is counted on
every fault row of each opened pair's batches (``fresh<N>_<M>`` in a POOL's name: tools.grammar_backtest's pools),
not only on the pool's misses: each row scored by the whole parser (tools.log_corpus_score.score_row) with the
reading and with it taken out (``read_subject`` answering None). Per pair: rows right gained, right rows lost, rows
still given a wrong class with it, and of the pool's misses (as met, the code before the pair's round) how many it
makes right. Pairs from N on (``--validate-from``) are the validation half. Then every healthy row of every open
corpus file and the whole logs (tools.whole_log_score): acting events with and without it.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

from faultlens.parsing import errors, trainer_tracebacks
from faultlens.parsing.line_corpus import CORPUS, open_files
from tools.grammar_backtest import _PAIR, _lines, halves_main
from tools.log_corpus_score import score_row
from tools.whole_log_score import score_folder

KEYS = ("faults", "gained", "lost", "still_wrong", "pool_misses", "pool_made_right")
_MODULES = (errors, trainer_tracebacks)


@contextmanager
def without_reading() -> Iterator[None]:
    """The parsers as they were before the reading: ``read_subject`` answers None where it is consulted."""
    kept = [m.read_subject for m in _MODULES]
    for m in _MODULES:
        m.read_subject = lambda etype, message: None  # type: ignore[assignment]
    try:
        yield
    finally:
        for m, f in zip(_MODULES, kept, strict=True):
            m.read_subject = f  # type: ignore[assignment]


def _right(row: dict[str, Any]) -> tuple[bool, bool]:
    """(right, read with a wrong class) of one fault row."""
    s = score_row(row)
    return not s.misses, bool(s.misses and s.misses[0]["got"])


def _pool_misses(pool: Path) -> list[str]:
    """The first line of each fault row the pool lists as missed (a cut row by its first 60 characters)."""
    out = []
    for text in pool.read_text(encoding="utf-8").split("\n"):
        try:
            row = json.loads(text, strict=False) if text.strip() else {}
        except json.JSONDecodeError:
            out.append(text.split('"', 4)[3][:60] if text.count('"') > 3 else "")
            continue
        if ("line" in row or "lines" in row) and not row.get("healthy"):
            out.append(_lines(row)[0])
    return out


def backtest_pair(pool: Path, show: bool, without: Callable[[], ContextManager[None]] = without_reading) -> dict[str, Any]:
    """One pair's rows with the reading and ``without`` it (another reading's backtest passes its own)."""
    a, b = (int(x) for x in _PAIR.search(pool.name).groups())  # type: ignore[union-attr]
    misses = _pool_misses(pool)
    out = dict.fromkeys(KEYS, 0) | {"pair": f"{a}_{b}", "pool_misses": len(misses)}
    for n in range(a, b + 1):
        for path in sorted((CORPUS / f"fresh{n}").glob("*.jsonl")):
            for text in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(text) if text.strip() else {}
                if not row.get("fault"):
                    continue
                out["faults"] += 1
                right, wrong = _right(row)
                with without():
                    was_right, _ = _right(row)
                out["gained"] += right and not was_right
                out["lost"] += was_right and not right
                out["still_wrong"] += wrong
                first = _lines(row)[0]
                in_pool = any(first.startswith(m) for m in misses if m)
                out["pool_made_right"] += in_pool and right and not was_right
                if show and right != was_right:
                    print(json.dumps({"pair": out["pair"], "gained": right, "want": row["fault"], "line": first[:160]}))
    return out


def firing(without: Callable[[], ContextManager[None]] = without_reading) -> dict[str, Any]:
    """Healthy open rows and whole-log ordinary lines that act, with and without the reading."""

    def healthy_fired() -> tuple[int, int]:
        rows = fired = 0
        for path in open_files():
            for text in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(text) if text.strip() else {}
                if row.get("healthy"):
                    rows += 1
                    fired += score_row(row).fired
        return rows, fired

    rows, fired = healthy_fired()
    whole = score_folder()[0].as_dict()
    with without():
        _, fired_before = healthy_fired()
        whole_before = score_folder()[0].as_dict()
    return {"healthy_rows": rows, "healthy_fired": fired, "healthy_fired_without": fired_before,
            "whole_log": {k: whole[k] for k in whole if "fired" in k or "right" in k},
            "whole_log_without": {k: whole_before[k] for k in whole_before if "fired" in k or "right" in k}}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return halves_main(argv, __doc__, 63, backtest_pair, KEYS, lambda show: [{"firing": True, **firing()}])


if __name__ == "__main__":
    raise SystemExit(main())
