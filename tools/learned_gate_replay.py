"""Replay a learned gate on the unread misses (issue 54, round G13): would a fault-vs-healthy model, asked
where the word gate or the class model's bar stops a line, have read the batches after it?

    python -m tools.learned_gate_replay MODELS POOL [POOL ...] [--rows] [--design-last 62]

MODELS holds ``<commit8>_gate.pkl`` (a scikit-learn pipeline, any fault against healthy) and
``<commit8>_base.pkl`` (the class model's exported numbers), both from ``tools.fallback_retrain MODELS
COMMIT:N --recipe gate|base``, at the CHECKPOINTS below: batch k is read with the models of the last
checkpoint at or before k, trained on fresh1..(checkpoint - 1) and that commit's own corpus and tables, so
never on batch k or anything later.

Rows: the POOLs' fault rows today's tree still misses with no event (tools.miss_stops), and every healthy
row of fresh29..OPENED_BATCHES today's tree keeps quiet. A line is ELIGIBLE where today's path stops it at
the gate (no alarm word, or a kernel line not an error) or at the class model (reads healthy, below its
bar), and its own level does not say it is information or a warning, nor its words that it retries or
recovered. Candidates, each on eligible lines:

- ``class>=T``: the checkpoint's class model, top class a fault with at least T (a retrain's reading, the
  no-gate candidate of tools/fallback_backtest.py);
- ``gate>=G``: the checkpoint's gate gives the line at least G of fault, and the class model's top
  FAULT class is read (the gate judges fault or not, the class model only which fault); ``gate>=G,ungated``
  only on lines the word gate stopped.

Printed per half (design: batch <= --design-last): right, wrong, healthy rows fired of quiet healthy rows.
``--whole-logs NAME ...``: for those candidates, the whole logs (tests/fixtures/whole_logs, each line's
manifest columns stripped) read with the last checkpoint's models: ordinary lines today's parsers keep quiet
that the candidate fires, and labelled fault lines it reads right (in their burst or not).
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from faultlens.parsing import fallback, line_corpus, line_model
from faultlens.parsing.severity import NOTICE, WARNING, reassured, says_retrying, severity_of, trainer_level
from tools.log_corpus_score import events_of, score_row
from tools.miss_stops import CORPUS, line_stop, message_of, still_missed
from tools.whole_log_score import WHOLE_LOGS, feed, labels_of, log_lines, manifest

# (first batch read with it, the commit it was trained at; trained on fresh1..first-1 there)
CHECKPOINTS = ((29, "44cbcf09"), (41, "a4384d65"), (53, "7637f7dd"), (63, "62ca8eae"), (66, "79247eeb"))
_ELIGIBLE = ("gate:", "model: reads healthy", "model: below threshold")


@dataclass
class Models:
    gate: Any  # scikit-learn pipeline: classes healthy / fault
    cls: line_model.LineModel

    def p_fault(self, text: str) -> float:
        return float(self.gate.predict_proba([text])[0][list(self.gate.classes_).index("fault")])


def load(folder: Path) -> dict[int, Models]:
    out = {}
    for first, commit in CHECKPOINTS:
        with (folder / f"{commit}_gate.pkl").open("rb") as f:
            gate = pickle.load(f)
        with (folder / f"{commit}_base.pkl").open("rb") as f:
            cls = line_model.LineModel(line_model._BuiltinsOnly(f).load(), {"checkpoint": commit})
        out[first] = Models(gate, cls)
    return out


def models_for(models: dict[int, Models], batch: int) -> Models:
    return models[max(first for first in models if first <= batch)]


def eligible(raw: str, source: str, want: str | None, shipped: line_model.LineModel) -> tuple[str, str] | None:
    """(message, today's stop) of a line a learned reading may be asked about, else None."""
    stop = line_stop(shipped, raw, source, want)[0]
    # A line a parser alone makes any event of (a record kept at info, an Xid echo folded in a stream) was taken.
    if not stop.startswith(_ELIGIBLE) or events_of({"line": raw, "source": source}):
        return None
    msg = message_of(raw, source)
    if says_retrying(msg) or reassured(msg):
        return None
    if source == "kernel":
        prio = severity_of(msg, raw).priority
        if prio is not None and prio >= NOTICE:
            return None
    elif trainer_level(msg) in (WARNING, NOTICE, 6, 7):
        return None
    return msg, stop


Reader = Callable[[Models, str, str], "str | None"]


def class_over(t: float) -> Reader:
    def read(m: Models, text: str, stop: str) -> str | None:
        p = m.cls.proba(text)
        best = max(range(len(p)), key=p.__getitem__)
        return m.cls.classes[best] if m.cls.classes[best] != line_model.HEALTHY and p[best] >= t else None

    return read


def gate_over(g: float, ungated_only: bool = False) -> Reader:
    def read(m: Models, text: str, stop: str) -> str | None:
        if (ungated_only and not stop.startswith("gate:")) or m.p_fault(text) < g:
            return None
        p = m.cls.proba(text)
        faults = [i for i, c in enumerate(m.cls.classes) if c != line_model.HEALTHY]
        return m.cls.classes[max(faults, key=p.__getitem__)]

    return read


CANDIDATES: dict[str, Reader] = {
    **{f"class>={t}": class_over(t) for t in (0.6, 0.7, 0.8, 0.9)},
    **{f"gate>={g}": gate_over(g) for g in (0.7, 0.8, 0.9, 0.95)},
    **{f"gate>={g},ungated": gate_over(g, True) for g in (0.7, 0.8, 0.9, 0.95)},
}


def row_reading(read: Reader, m: Models, row: dict[str, Any], shipped: line_model.LineModel) -> str | None:
    source = row.get("source", "kernel")
    for raw in row.get("lines") or [row["line"]]:
        found = eligible(raw, source, row.get("fault"), shipped)
        if found is None:
            continue
        msg, stop = found
        fault = read(m, f"{source} {line_model.normalise(msg)}", stop)
        if fault and not fallback._guess_unfounded(fault, msg, raw):
            return fault
    return None


def quiet_healthy(first: int) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for n in range(first, line_corpus.OPENED_BATCHES + 1):
        for path in sorted((CORPUS / f"fresh{n}").glob("*.jsonl")):
            for t in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(t) if t.strip() else None
                if row is not None and row.get("healthy") and not score_row(row).fired:
                    out.setdefault(n, []).append(row)
    return out


def whole_logs(read: Reader, m: Models, shipped: line_model.LineModel) -> tuple[dict[str, int], list[str]]:
    """Ordinary lines today's parsers keep quiet that the candidate fires; labelled faults it reads right or wrong."""
    t = {"ordinary": 0, "fired": 0, "faults": 0, "right": 0, "wrong": 0}
    shown = []
    for entry in manifest(WHOLE_LOGS):
        lines, labels, source = log_lines(WHOLE_LOGS, entry), labels_of(WHOLE_LOGS, entry["name"]), entry["source"]
        cut = re.compile(entry["strip"]) if entry.get("strip") else None
        today = feed(lines, source, entry.get("strip", ""))
        for n, line in enumerate(lines, 1):
            want = labels.get(n)
            if want == "other" or any(g.acts for g in today[n - 1]):
                continue
            text = cut.sub("", line, count=1) if cut else line
            got = row_reading(read, m, {"line": text, "source": source, "fault": want}, shipped)
            if want is None:
                t["ordinary"] += 1
                t["fired"] += bool(got)
                if got:
                    shown.append(f"whole {entry['name']}:{n} FIRED {got}: {text[:140]}")
            elif got:
                t["faults"] += 1
                t["right" if got == want else "wrong"] += 1
    return t, shown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", type=Path)
    ap.add_argument("pools", nargs="+", type=Path)
    ap.add_argument("--rows", action="store_true")
    ap.add_argument("--design-last", type=int, default=62)
    ap.add_argument("--whole-logs", nargs="*", choices=sorted(CANDIDATES), help="score these candidates on the whole logs only")
    args = ap.parse_args(argv)
    models = load(args.models)
    shipped = line_model.current()
    if args.whole_logs:
        last = models_for(models, line_corpus.OPENED_BATCHES)
        for name in args.whole_logs:
            t, shown = whole_logs(CANDIDATES[name], last, shipped)
            print(json.dumps({"candidate": name, "whole_logs": True, **t}))
            if args.rows:
                print("\n".join(shown))
        return 0
    misses = [r for pool in args.pools for r in still_missed(pool) if not events_of(r)]
    healthy = quiet_healthy(CHECKPOINTS[0][0])
    rows_out = []
    for name, read in CANDIDATES.items():
        tally = {h: {"misses": 0, "right": 0, "wrong": 0, "healthy": 0, "fired": 0} for h in ("design", "validation")}
        for row in misses:
            t = tally["design" if row["batch"] <= args.design_last else "validation"]
            t["misses"] += 1
            got = row_reading(read, models_for(models, row["batch"]), row, shipped)
            if got:
                t["right" if got == row.get("fault") else "wrong"] += 1
                rows_out.append(f"{name} fresh{row['batch']} {'right' if got == row.get('fault') else 'WRONG ' + got}: "
                                f"{(row.get('line') or ' | '.join(row['lines']))[:140]}")  # fmt: skip
        for n, rows in healthy.items():
            t = tally["design" if n <= args.design_last else "validation"]
            for row in rows:
                t["healthy"] += 1
                got = row_reading(read, models_for(models, n), row, shipped)
                if got:
                    t["fired"] += 1
                    rows_out.append(f"{name} fresh{n} FIRED {got}: {(row.get('line') or ' | '.join(row['lines']))[:140]}")
        for half, t in tally.items():
            print(json.dumps({"candidate": name, "half": half, **t}))
    if args.rows:
        print("\n".join(rows_out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
