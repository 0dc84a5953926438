"""Score the parsers on the real-line corpus (tests/fixtures/log_corpus/*.jsonl).

    python -m tools.log_corpus_score [CORPUS_DIR] [--misses]

Each row is one record from a public source: ``line`` (or ``lines`` for a record the kernel
spreads over several), ``source`` (kernel / nccl), ``provenance``, and what it must give:
``fault`` (a fault class, or null for "any"), ``action`` (optional: the first action it must carry), ``xid`` (the Xid number an event must carry), or
``healthy: true`` (alarming-looking but fine: no event may act). Every row is parsed by a fresh
parser, so rows never fold into each other.

Printed: the fraction of fault rows classified (some event), with the right class, Xid rows with
the right number, and healthy rows that fired; per file and per class.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultlens.parsing.registry import parser_for

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "log_corpus"


@dataclass
class Score:
    faults: int = 0
    classified: int = 0
    class_right: int = 0
    xids: int = 0
    xid_right: int = 0
    healthy: int = 0
    fired: int = 0
    misses: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: "Score") -> None:
        for k in ("faults", "classified", "class_right", "xids", "xid_right", "healthy", "fired"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.misses.extend(other.misses)

    def as_dict(self) -> dict[str, Any]:
        def frac(a: int, b: int) -> float | None:
            return round(a / b, 3) if b else None

        return {"faults": self.faults, "classified": frac(self.classified, self.faults), "class_right": frac(self.class_right, self.faults),
                "xids": self.xids, "xid_right": frac(self.xid_right, self.xids), "healthy": self.healthy, "healthy_fired": self.fired}


def rows(corpus: Path = CORPUS) -> dict[str, list[dict[str, Any]]]:
    return {p.name: [json.loads(l) for l in p.read_text(encoding="utf-8").splitlines() if l.strip()] for p in sorted(corpus.glob("*.jsonl"))}


def events_of(row: dict[str, Any]) -> list[Any]:
    parser = parser_for(row.get("source", "kernel"))
    lines = row["lines"] if "lines" in row else [row["line"]]
    out = [e for line in lines for e in parser.feed(line)]
    return out + parser.flush()


def score_row(row: dict[str, Any]) -> Score:
    s = Score()
    events = events_of(row)
    if row.get("healthy"):
        s.healthy = 1
        acting = [e for e in events if e.data.get("action") not in ("none", None)]
        if acting:
            s.fired = 1
            s.misses.append({**row, "got": [(e.kind, e.data.get("fault"), e.data.get("action")) for e in acting]})
        return s
    s.faults = 1
    s.classified = int(bool(events))
    want, act = row.get("fault"), row.get("action")
    s.class_right = int(any((want is None or e.data.get("fault") == want) and (act is None or e.data.get("action") == act) for e in events))
    if "xid" in row:
        s.xids = 1
        s.xid_right = int(any(e.data.get("xid") == row["xid"] for e in events))
    if not (s.classified and s.class_right and (s.xid_right or not s.xids)):
        s.misses.append({**row, "got": [(e.kind, e.data.get("fault"), e.data.get("action"), e.data.get("xid")) for e in events]})
    return s


def score(corpus: Path = CORPUS) -> tuple[Score, dict[str, Score], dict[str, Score]]:
    total, by_file, by_class = Score(), defaultdict(Score), defaultdict(Score)
    for name, rs in rows(corpus).items():
        for row in rs:
            s = score_row(row)
            total.add(s)
            by_file[name].add(s)
            by_class["healthy" if row.get("healthy") else row.get("fault") or ("xid" if "xid" in row else "any")].add(s)
    return total, dict(by_file), dict(by_class)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="?", type=Path, default=CORPUS)
    ap.add_argument("--misses", action="store_true", help="print every row that missed")
    args = ap.parse_args()
    total, by_file, by_class = score(args.corpus)
    for name, s in by_file.items():
        print(json.dumps({"file": name, **s.as_dict()}))
    for name, s in sorted(by_class.items()):
        print(json.dumps({"class": name, **s.as_dict()}))
    print(json.dumps({"total": True, **total.as_dict()}))
    if args.misses:
        for m in total.misses:
            print(json.dumps(m)[:400])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
