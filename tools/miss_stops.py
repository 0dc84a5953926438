"""Where each unread miss stops on today's parsers (issue 54, round G13): the gate, a guard, or the model.

    python -m tools.miss_stops POOL [POOL ...] [--rows] [--design-last 62]

Each POOL is an ``unread_fresh<N>_<M>_<commit8>.txt`` file (``tools.log_corpus_score --misses`` of
fresh N..M as met unread). Its fault rows that today's tree still misses are re-read along the
parsers' path, without changing it, and each is given the step its most advanced line stopped at:

- ``gate: not alarming``: no word of parsing/alarm.py and no kernel priority of err or worse;
- ``gate: kernel not error``: a kernel line alarming in words but not an error by its severity;
- ``guard: <name>``: a parsing/fallback.py or trainer_log filter before the model (warning level,
  says_retrying, reassured, benign table, by_program, a driver without class, catalogue_knows,
  _guess_unfounded);
- ``model: reads healthy`` / ``model: below threshold (right|wrong class)``: the model was asked;
- ``model: class wrong`` / ``rule: class wrong`` / ``rule: right class, wrong action or xid``: an event was made;
- ``taken before the fallback``: the model would have read it right, but a rule, a traceback or the
  line's own level took the line first and made nothing that scores.

Counts are printed per half (design: first batch <= --design-last; validation after), then each row
with ``--rows``. Reads the opened fixtures and the pools only; a sealed batch is refused.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from faultlens.parsing import fallback, line_corpus, line_model
from faultlens.parsing.alarm import looks_alarming
from faultlens.parsing.benign import for_source as benign_for
from faultlens.parsing.severity import WARNING, reassured, says_retrying, severity_of, trainer_level
from faultlens.parsing.subsystems import attribute, by_program
from faultlens.parsing.timestamps import program_of, split_timestamp
from faultlens.parsing.trainer_log import _PREFIX
from tools.log_corpus_score import events_of, score_row

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "log_corpus"
_POOL = re.compile(r"^unread_fresh(\d+)_(\d+)_([0-9a-f]{8})\.txt$")
# How far along the path each stop lies: a row's stop is its most advanced line's.
_ORDER = ("gate", "guard", "model: reads", "model: below", "taken", "model: class", "rule")


def batches_of(pool: Path) -> range:
    m = _POOL.match(pool.name)
    if m is None:
        raise ValueError(f"{pool}: not an unread_fresh<N>_<M>_<commit8>.txt pool")
    first, last = int(m.group(1)), max(int(m.group(1)), int(m.group(2)))
    if last > line_corpus.OPENED_BATCHES:
        raise ValueError(f"{pool}: fresh{last} is sealed (OPENED_BATCHES {line_corpus.OPENED_BATCHES})")
    return range(first, last + 1)


def still_missed(pool: Path) -> list[dict[str, Any]]:
    """The pool's fault rows today's tree still misses (a pool row is its fixture row's JSON, cut at 400)."""
    text = pool.read_text(encoding="utf-8")
    out = []
    for n in batches_of(pool):
        for path in sorted((CORPUS / f"fresh{n}").glob("*.jsonl")):
            for t in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(t) if t.strip() else None
                if row is None or row.get("healthy") or json.dumps(row, ensure_ascii=False)[:-1][:300] not in text:
                    continue
                if score_row(row).misses:
                    out.append({**row, "batch": n})
    return out


def _model_stop(
    model: line_model.LineModel, msg: str, raw: str, source: str, want: str | None, threshold: float
) -> tuple[str, str]:
    probs = model.proba(f"{source} {line_model.normalise(msg)}")
    best = max(range(len(probs)), key=probs.__getitem__)
    fault, p = model.classes[best], probs[best]
    if fault == line_model.HEALTHY:
        top = max((i for i in range(len(probs)) if i != best), key=probs.__getitem__)
        return "model: reads healthy", f"{p:.2f}; top fault {model.classes[top]} {probs[top]:.2f}"
    right = "right" if want in (None, fault) else "wrong"
    if p < threshold:
        return f"model: below threshold ({right} class)", f"{fault} {p:.2f} < {threshold}"
    if fallback._guess_unfounded(fault, msg, raw):
        return "guard: _guess_unfounded", f"{fault} {p:.2f}"
    if right == "wrong":
        return "model: class wrong", f"{fault} {p:.2f}"
    return "taken before the fallback", f"model would read {fault} {p:.2f}"


def message_of(raw: str, source: str) -> str:
    """The line's message as its parser reads it: after the clock, and a trainer line's rank prefix."""
    if source != "kernel" and (m := _PREFIX.match(raw)) is not None:
        raw = raw[m.end() :]
    return split_timestamp(raw).message


def line_stop(model: line_model.LineModel, raw: str, source: str, want: str | None) -> tuple[str, str]:
    """The step today's path stops a line no event scored at, and what was read there."""
    msg = message_of(raw, source)
    if source == "kernel" and benign_for(source).match(msg) is not None:
        return "guard: benign table", ""
    if source == "kernel":
        sev = severity_of(msg, raw)
        if not sev.is_error:
            stop = "gate: kernel not error" if looks_alarming(msg, raw) else "gate: not alarming"
            return stop, f"{sev.why()}; if asked: {' '.join(_model_stop(model, msg, raw, source, want, line_model.THRESHOLD))}"
        att = attribute(msg)
        if att is None or att.fault is None:
            att = by_program(program_of(raw)) or att
        if att is not None and att.fault is not None:
            return "taken before the fallback", f"subsystem {att.subsystem} {att.fault}"
        if att is not None and not fallback.names_a_driver(att):
            return "guard: tag names no driver", att.tag
        if att is not None and fallback.catalogue_knows(msg):
            return "guard: catalogue_knows", att.subsystem
        threshold = fallback.DRIVER_WITHOUT_CLASS if att is not None else line_model.THRESHOLD
        return _model_stop(model, msg, raw, source, want, threshold)
    if not looks_alarming(msg):
        return "gate: not alarming", f"if asked: {' '.join(_model_stop(model, msg, raw, source, want, line_model.THRESHOLD))}"
    if benign_for(source).match(msg) is not None:
        return "guard: benign table", ""
    if reassured(msg):
        return "guard: reassured", ""
    if says_retrying(msg):
        return "guard: says_retrying", ""
    if trainer_level(msg) == WARNING:
        return "guard: warning level", ""
    if by_program(program_of(raw)) is not None:
        return "guard: by_program", program_of(raw) or ""
    return _model_stop(model, msg, raw, source, want, line_model.THRESHOLD)


def row_stop(model: line_model.LineModel, row: dict[str, Any]) -> tuple[str, str]:
    """A missed row's stop: the event's basis when one was made, else its most advanced line's stop."""
    events = events_of(row)
    want = row.get("fault")
    if events:
        if any(want in (None, e.data.get("fault")) for e in events):
            return "rule: right class, wrong action or xid", str([(e.data.get("fault"), e.data.get("action")) for e in events])
        basis = "model" if all(e.data.get("basis") == "model" for e in events) else "rule"
        return f"{basis}: class wrong", ",".join(sorted({str(e.data.get("fault")) for e in events}))
    source = row.get("source", "kernel")
    stops = [line_stop(model, raw, source, want) for raw in row.get("lines") or [row["line"]]]
    return max(stops, key=lambda s: next(i for i, k in enumerate(_ORDER) if s[0].startswith(k)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pools", nargs="+", type=Path)
    ap.add_argument("--rows", action="store_true", help="print each row's stop")
    ap.add_argument("--design-last", type=int, default=62, help="the last batch of the design half (default 62)")
    args = ap.parse_args(argv)
    model = line_model.current()
    counts: dict[str, Counter[str]] = {"design": Counter(), "validation": Counter()}
    shown = []
    for pool in args.pools:
        for row in still_missed(pool):
            stop, detail = row_stop(model, row)
            half = "design" if row["batch"] <= args.design_last else "validation"
            counts[half][stop] += 1
            shown.append(
                f"fresh{row['batch']} {stop} [{detail}] want {row.get('fault')}: {(row.get('line') or ' | '.join(row['lines']))[:140]}"
            )
    for half, c in counts.items():
        print(json.dumps({"half": half, "still_missed": sum(c.values()), **dict(c.most_common())}))
    if args.rows:
        print("\n".join(shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
