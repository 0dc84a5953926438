"""Log recognition judged the way an outside check does: on sources it was not built from.

    .venv/bin/python -m bench.bench_log_recognition [--by file|repo] [--heldout]
    .venv/bin/python -m bench.bench_log_recognition --fresh tests/fixtures/log_corpus/fresh1

For each source of the real-line corpus (tests/fixtures/log_corpus/*.jsonl; a source is a corpus
file, or with ``--by repo`` the repository its provenance names) the line model is retrained
WITHOUT that source's lines and the source's rows are parsed by the full pipeline (code, rule
catalogue, subsystem table, that model). Printed, one JSON line each:

- ``leave_one_source_out``: per-class recall of the fault rows and healthy rows that fired (an
  action other than none), summed over the sources: the figure to raise;
- ``model_alone_loso``: the same for the model alone (its class for each row, no rules);
- ``no_model``: the pipeline without the model (rules and subsystems only);
- ``in_corpus``: the pipeline with a model trained on everything (what tools/log_corpus_score says);
- ``heldout`` (with --heldout): the held-out folder, scored once with the model trained on the
  whole corpus. Its misses are not printed: reading them to write rules would make it one more
  mined source.

The rules themselves were written from these sources, so only the model is truly left out; the
held-out folder is the fair test of the rules.

``--fresh DIR`` (repeatable) scores a fresh batch instead (tests/fixtures/log_corpus/fresh*: real lines
gathered after the rules, from sources the corpus never cited) with the code as it stands, its shipped
line model included, and skips the leave-one-source-out work. One JSON line per family (corpus file:
fault rows, right, classified by any class, healthy rows and those that fired), then the total with the
per-class recall. Misses are not printed, for the held-out folder's reason;
``tools/log_corpus_score.py DIR --misses`` prints them when a report needs them.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from faultlens.parsing import line_corpus, line_model
from tools.log_corpus_score import corpus_files, read_rows, score_row, source_of

HELDOUT = line_corpus.CORPUS / "heldout"


class Tally:
    def __init__(self) -> None:
        self.by_class: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # class -> [right, total]
        self.healthy = [0, 0]  # [fired, total]

    def add(self, row: dict[str, Any], right: bool | None, fired: bool | None) -> None:
        if row.get("healthy"):
            self.healthy[0] += int(bool(fired))
            self.healthy[1] += 1
            return
        cls = row.get("fault") or ("xid" if "xid" in row else "any")
        self.by_class[cls][0] += int(bool(right))
        self.by_class[cls][1] += 1

    def as_dict(self) -> dict[str, Any]:
        right = sum(r for r, _ in self.by_class.values())
        total = sum(t for _, t in self.by_class.values())
        return {
            "fault_rows": total, "class_right": round(right / total, 3) if total else None,
            "healthy_rows": self.healthy[1], "healthy_fired": self.healthy[0],
            "recall": {c: f"{r}/{t}" for c, (r, t) in sorted(self.by_class.items())},
        }  # fmt: skip


def _pipeline(row: dict[str, Any], tally: Tally) -> None:
    s = score_row(row)
    tally.add(row, s.class_right == 1 and (s.xid_right == 1 or not s.xids), s.fired == 1)


def _model_alone(model: line_model.LineModel, row: dict[str, Any], tally: Tally) -> None:
    lines = row.get("lines") or [row.get("line", "")]
    guess = model.guess(" ".join(lines), row.get("source", "kernel"))
    if row.get("healthy"):
        tally.add(row, None, guess is not None)
    elif row.get("fault"):
        tally.add(row, guess is not None and guess.fault == row["fault"], None)


def fresh(folder: Path) -> list[dict[str, Any]]:
    """A fresh batch scored by the code as it is: a line per family (file), then the total."""
    out: list[dict[str, Any]] = []
    total, sources = Tally(), set()
    classified = [0, 0]  # fault rows that raised any event, fault rows
    xids = [0, 0]  # Xid rows with the right number, Xid rows
    for path in corpus_files(folder):
        fam, fam_classified = Tally(), 0
        for row in read_rows(path):
            s = score_row(row)
            right, fired = s.class_right == 1 and (s.xid_right == 1 or not s.xids), s.fired == 1
            fam.add(row, right, fired)
            total.add(row, right, fired)
            sources.add(source_of(row))
            if not row.get("healthy"):
                fam_classified += s.classified
                classified[0] += s.classified
                classified[1] += 1
                xids[0] += s.xid_right
                xids[1] += s.xids
        d = fam.as_dict()
        out.append({"figure": "fresh_family", "folder": folder.name, "family": path.stem, "fault_rows": d["fault_rows"],
                    "class_right": d["class_right"], "classified": round(fam_classified / d["fault_rows"], 3) if d["fault_rows"] else None,
                    "healthy_rows": d["healthy_rows"], "healthy_fired": d["healthy_fired"]})  # fmt: skip
    d = total.as_dict()
    out.append({"figure": "fresh", "folder": folder.name, "sources": len(sources), **{k: v for k, v in d.items() if k != "recall"},
                "classified": round(classified[0] / classified[1], 3) if classified[1] else None,
                "xids": f"{xids[0]}/{xids[1]}", "recall": d["recall"]})  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--by", choices=("file", "repo"), default="file", help="what one source is")
    ap.add_argument("--heldout", action="store_true", help="also score the held-out folder (totals only)")
    ap.add_argument("--corpus", type=Path, default=line_corpus.CORPUS)
    ap.add_argument(
        "--fresh",
        type=Path,
        action="append",
        metavar="DIR",
        help="score this fresh batch with the code as it is, instead of leave-one-source-out (repeatable)",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    if args.fresh:
        for folder in args.fresh:
            for line in fresh(folder):
                print(json.dumps(line))
        print(json.dumps({"seconds": round(time.perf_counter() - started, 1)}))
        return 0

    rows = [(name, row) for name, rs in line_corpus.read_rows(args.corpus).items() for row in rs]
    all_samples = line_corpus.samples(args.corpus)

    def source_of(name: str, row: dict[str, Any]) -> str:
        return name if args.by == "file" else line_corpus.origin_of(row.get("provenance", ""), name)

    # Which samples each source owns: a sample's corpus file and line identify its row.
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for name, row in rows:
        groups[source_of(name, row)].append(row)
    owned_lines = {g: {" ".join(r.get("lines") or [r.get("line", "")]) for r in rs} for g, rs in groups.items()}

    loso, alone, no_model, in_corpus = Tally(), Tally(), Tally(), Tally()
    per_source = {}
    for g, rs in sorted(groups.items()):
        repos = {line_corpus.origin_of(r.get("provenance", ""), g) for r in rs}
        # Leave the source out: its rows, and the tables' examples that cite its repositories.
        train = [s for s in all_samples if s.line not in owned_lines[g] and not (s.origin in repos and "/" in s.origin)]
        if len({s.label for s in train}) < 2:
            continue
        model = line_corpus.train(train)
        t = Tally()
        with line_model.using(model):
            for row in rs:
                _pipeline(row, loso)
                _pipeline(row, t)
        for row in rs:
            _model_alone(model, row, alone)
        per_source[g] = t.as_dict()
    with line_model.using(None):
        for _, row in rows:
            _pipeline(row, no_model)
    full = line_corpus.train(all_samples)
    with line_model.using(full):
        for _, row in rows:
            _pipeline(row, in_corpus)

    for g, d in per_source.items():
        print(json.dumps({"source": g, "class_right": d["class_right"], "fault_rows": d["fault_rows"], "healthy_fired": d["healthy_fired"]}))
    print(json.dumps({"figure": "leave_one_source_out", "by": args.by, "sources": len(per_source), **loso.as_dict()}))
    print(json.dumps({"figure": "model_alone_loso", **alone.as_dict()}))
    print(json.dumps({"figure": "no_model", **no_model.as_dict()}))
    print(json.dumps({"figure": "in_corpus", **in_corpus.as_dict()}))
    if args.heldout and HELDOUT.is_dir():
        held = Tally()
        with line_model.using(full):
            for _, rs in line_corpus.read_rows(HELDOUT).items():
                for row in rs:
                    _pipeline(row, held)
        print(json.dumps({"figure": "heldout", **held.as_dict()}))
    print(json.dumps({"seconds": round(time.perf_counter() - started, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
