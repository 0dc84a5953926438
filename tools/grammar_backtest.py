"""Backtest the state grammar (parsing.state_grammar) on the lines no reading took, pair by pair.

    python -m tools.grammar_backtest POOL ... [--validate-from N] [--show]

Each POOL is what ``tools.log_corpus_score --misses`` printed for an opened pair of fresh batches
(``...fresh<N>_<M>...txt`` in its name), on the code just before the round that opened the pair:
its rows with ``got == []`` are the fault lines nothing read. For each pair the grammar is run on
them: caught right (its class is the row's), caught wrong (another class). Pairs from N on
(``--validate-from``) are the validation half, the rest the design half; each half is summed.
Then its firing: every healthy row of every open corpus file (the development set, the held-out
set, the mined files, the opened fresh batches; never a sealed one) and every ordinary line of
the whole logs (tests/fixtures/whole_logs), read by the grammar alone, whatever the rules did with
them: a line it reads at the line's own level of notice or below is recorded, not fired.
``--show`` prints each reading.

A pool file's row may be cut short (a long line in a long output); such a row is found again in
its pair's fixture files by the start of its line, and counts as unread when the parser at HEAD
gives it no event.
"""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from faultlens.parsing.line_corpus import CORPUS, open_files
from faultlens.parsing.registry import parser_for
from faultlens.parsing.state_grammar import Reading, read_state
from faultlens.parsing.timestamps import split_timestamp
from tools.whole_log_score import WHOLE_LOGS

_PAIR = re.compile(r"fresh(\d+)_(\d+)")
_CUT_ROW = re.compile(r'\{"lines?": \[?"((?:[^"\\]|\\.){0,60})')


def _lines(row: dict[str, Any]) -> list[str]:
    return row["lines"] if "lines" in row else [row["line"]]


def reading_of(row: dict[str, Any]) -> Reading | None:
    """The grammar's first reading of a row's lines (its ``quiet``: the line's own level makes it a record only)."""
    for line in _lines(row):
        msg = split_timestamp(line).message
        got = read_state(msg, line, row.get("source", "kernel"))
        if got is not None:
            return got
    return None


def _unread_at_head(row: dict[str, Any]) -> bool:
    parser = parser_for(row.get("source", "kernel"))
    return not [e for line in _lines(row) for e in parser.feed(line)] + parser.flush()


def pool_rows(pool: Path) -> tuple[list[dict[str, Any]], int]:
    """The pool's fault rows nothing read, and the pair's fault count (its total line)."""
    a, b = (int(x) for x in _PAIR.search(pool.name).groups())  # type: ignore[union-attr]
    fixtures = [json.loads(t) for n in (a, b) for p in sorted((CORPUS / f"fresh{n}").glob("*.jsonl"))
                for t in p.read_text(encoding="utf-8").splitlines() if t.strip()]  # fmt: skip
    unread, faults = [], 0
    for text in pool.read_text(encoding="utf-8").split("\n"):
        if not text.strip():
            continue
        try:
            row = json.loads(text, strict=False)
        except json.JSONDecodeError:
            m = _CUT_ROW.match(text)
            head = json.loads('"' + m.group(1).rstrip("\\") + '"') if m else None
            whole = next((r for r in fixtures if head and _lines(r)[0].startswith(head)), None)
            if whole is not None and not whole.get("healthy") and _unread_at_head(whole):
                unread.append(whole)
            continue
        if row.get("total"):
            faults = row["faults"]
        elif ("line" in row or "lines" in row) and not row.get("healthy") and row.get("got") == []:
            unread.append(row)
    return unread, faults


def backtest_pool(pool: Path, show: bool) -> dict[str, Any]:
    unread, faults = pool_rows(pool)
    right = wrong = 0
    for row in unread:
        got = reading_of(row)
        if got is None:
            continue
        ok = got.fault == row.get("fault")
        right += ok
        wrong += not ok
        if show:
            print(json.dumps({"pool": pool.name[:24], "right": ok, "want": row.get("fault"), "got": got.fault,
                              "object": got.object, "state": got.state, "line": _lines(row)[0][:160]}))  # fmt: skip
    return {"pair": pool.name, "faults": faults, "unread": len(unread), "caught_right": right, "caught_wrong": wrong}


# What a by-rule backtest counts per pool (storage_backtest, own_failure_backtest).
RULE_HALF_KEYS = ("faults", "unread", "acting_right", "recorded_right", "caught_wrong")


def backtest_rule_pool(pool: Path, rule: str, show: bool) -> dict[str, Any]:
    """One pool's unread rows the reading named ``rule`` (Reading.rule) takes: right and acting, right and
    recorded only (quiet), or given another class."""
    unread, faults = pool_rows(pool)
    out: dict[str, int] = dict.fromkeys(RULE_HALF_KEYS, 0) | {"faults": faults, "unread": len(unread)}
    for row in unread:
        got = reading_of(row)
        if got is None or got.rule != rule:
            continue
        ok = got.fault == row.get("fault")
        key = "caught_wrong" if not ok else "recorded_right" if got.quiet else "acting_right"
        out[key] += 1
        if show:
            print(json.dumps({"pool": pool.name[:24], "right": ok, "want": row.get("fault"), "quiet": got.quiet,
                              "object": got.object, "state": got.state, "line": _lines(row)[0][:160]}))  # fmt: skip
    return {"pair": pool.name, **out}


def open_fault_rows() -> Iterator[tuple[Path, dict[str, Any], Reading | None]]:
    """Every fault row of every open corpus file, with its path and the grammar's reading of it (the by-rule
    backtests' reach: what a reading takes of the rows the rules already read)."""
    for path in open_files():
        for text in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(text) if text.strip() else {}
            if row.get("fault"):
                yield path, row, reading_of(row)


def class_reach(rule: str, show: bool) -> dict[str, Any]:
    """Open corpus fault rows the reading named ``rule`` takes by itself, whatever the rules did with them, with
    the row's class or another, by the row's class (the accelerator-state and storage-client backtests' reach)."""
    rows = 0
    right: Counter[str] = Counter()
    wrong: Counter[str] = Counter()
    for path, row, got in open_fault_rows():
        rows += 1
        if got is None or got.rule != rule:
            continue
        fault = row["fault"]
        (right if got.fault == fault else wrong)[fault] += 1
        if show and got.fault != fault:
            print(json.dumps({"other_class": fault, "got": got.fault, "file": path.name, "object": got.object,
                              "line": _lines(row)[0][:160]}))  # fmt: skip
    return {"fault_rows": rows, "read_right": sum(right.values()), "read_wrong": sum(wrong.values()),
            "right_by_class": dict(right.most_common()), "wrong_by_class": dict(wrong.most_common())}  # fmt: skip


def firing(show: bool, keep: Callable[[Reading], bool] = lambda _: True) -> dict[str, Any]:
    """Healthy corpus rows and ordinary whole-log lines the grammar reads (acting, and recorded only);
    ``keep``: which readings count (tools.storage_backtest: the storage vocabulary's only)."""
    healthy = fired = recorded = 0
    for path in open_files():
        for text in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(text) if text.strip() else {}
            if not row.get("healthy"):
                continue
            healthy += 1
            reading = reading_of(row)
            if reading is not None and keep(reading):
                fired += reading.quiet is None
                recorded += reading.quiet is not None
                if show:
                    print(json.dumps({"healthy": str(path.relative_to(CORPUS)), "quiet": reading.quiet, "got": reading.fault,
                                      "object": reading.object, "state": reading.state, "line": _lines(row)[0][:160]}))  # fmt: skip
    ordinary = o_fired = o_recorded = 0
    manifest = tomllib.loads((WHOLE_LOGS / "manifest.toml").read_text(encoding="utf-8"))
    for log in manifest["log"]:
        labelled = {
            json.loads(t)["line"] for t in (WHOLE_LOGS / f"{log['name']}.labels.jsonl").read_text().splitlines() if t.strip()
        }
        cut = re.compile(log["strip"]) if log.get("strip") else None
        for n, line in enumerate((WHOLE_LOGS / log["file"]).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if n in labelled:
                continue
            ordinary += 1
            text = cut.sub("", line, count=1) if cut else line
            msg = split_timestamp(text).message
            got = read_state(msg, text, log["source"])
            if got is not None and keep(got):
                q = got.quiet is not None
                o_fired += not q
                o_recorded += q
                if show:
                    print(json.dumps({"whole_log": log["name"], "n": n, "quiet": q, "got": got.fault, "object": got.object,
                                      "state": got.state, "line": text[:160]}))  # fmt: skip
    return {
        "healthy_rows": healthy,
        "healthy_fired": fired,
        "healthy_recorded": recorded,
        "whole_log_ordinary": ordinary,
        "whole_log_fired": o_fired,
        "whole_log_recorded": o_recorded,
    }


def pair_of(pool: Path) -> int:
    """The first batch of the opened pair a pool file is of (``...fresh<N>_<M>...`` in its name)."""
    return int(_PAIR.search(pool.name).group(1))  # type: ignore[union-attr]


def print_by_half(pools: Iterable[Path], validate_from: int, backtest: Callable[[Path], dict[str, Any]],
                  keys: Iterable[str]) -> None:
    """Each pool's ``backtest`` printed in pair order, then each half's sums of ``keys``: pairs from
    ``validate_from`` on are the validation half, the rest the design half (every backtest tool's report)."""
    halves: dict[str, dict[str, int]] = {}
    for pool in sorted(pools, key=pair_of):
        r = backtest(pool)
        print(json.dumps(r), flush=True)
        h = halves.setdefault("validation" if pair_of(pool) >= validate_from else "design", dict.fromkeys(keys, 0))
        for k in h:
            h[k] += r[k]
    for half, h in halves.items():
        print(json.dumps({"half": half, **h}))


def halves_main(argv: list[str] | None, doc: str | None, validate_from: int, backtest: Callable[[Path, bool], dict[str, Any]],
                keys: Iterable[str], after: Callable[[bool], Iterable[dict[str, Any]]]) -> int:
    """The command line every backtest tool shares: its pools by half (``backtest(pool, show)``, the sums of
    ``keys``), then, unless --no-firing, each line ``after(show)`` gives (its firing, its reach)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pools", nargs="*", type=Path)
    ap.add_argument("--validate-from", type=int, default=validate_from, help="first batch of the validation half")
    ap.add_argument("--show", action="store_true", help="print each reading")
    ap.add_argument("--no-firing", action="store_true", help="skip the firing (and reach) counts")
    args = ap.parse_args(argv)
    print_by_half(args.pools, args.validate_from, lambda pool: backtest(pool, args.show), keys)
    if not args.no_firing:
        for line in after(args.show):
            print(json.dumps(line), flush=True)
    return 0


def rule_backtest_main(argv: list[str] | None, doc: str | None, rule: str, validate_from: int,
                       reach: Callable[[bool], dict[str, Any]]) -> int:
    """The command line of a backtest of one reading (Reading.rule ``rule``): its pools by half, then
    its firing over every healthy row and ``reach`` (what it reads of the open corpus by itself)."""
    return halves_main(argv, doc, validate_from, lambda pool, show: backtest_rule_pool(pool, rule, show), RULE_HALF_KEYS,
                       lambda show: [{"firing": True, **firing(show, keep=lambda reading: reading.rule == rule)},
                                     {"reach": True, **reach(show)}])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return halves_main(argv, __doc__, 47, backtest_pool, ("faults", "unread", "caught_right", "caught_wrong"),
                       lambda show: [{"firing": True, **firing(show)}])  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
