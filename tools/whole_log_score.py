"""Score the parsers on whole real logs (tests/fixtures/whole_logs): every line, in order.

    python -m tools.whole_log_score [FOLDER] [--only NAME ...] [--misses]

The line corpus (tools/log_corpus_score) judges single collected lines, each by a fresh parser. A
deployed agent reads every line of a node's logs through one parser per stream, so multi-line
records, folded echoes and the boot window work across lines; and most of what it reads is
ordinary. Here each log of FOLDER's manifest.toml is fed as one stream, in order, to one parser
of its source (the manifest's ``strip`` first removes the columns a dataset added before the
line, its alert label among them), and its ``<name>.labels.jsonl`` says which lines a person
would alert on: ``fault`` a class of docs/design.md §9, or ``other`` (an alert, class not ours).

A labelled line is caught when an event of its class comes on it, on one of the next RECORD_TAIL
lines (a record that closes later: a traceback's exception line) or on the head of its burst (an
earlier line of the same class within FOLD_BACK, every line between labelled the same: the
echoes the parser folds into the first line's event), or (round 47) when the line read alone is of its
class on a unit (a device, else a rank) and an event of that class on the same unit came within
FOLD_WINDOW lines before it: the parser folded it into that burst's event, unlabelled lines between. ``alerted`` is the same with any class,
counting only events that act (an action other than none). An ordinary line (unlabelled) fired
when an event on it acts.

Printed, one JSON object a line: per log and in total, lines, labelled faults, right class,
alerted, ordinary lines, ordinary lines fired and per 1000, ``other`` alerts fired; then per class.
``--misses`` adds every missed fault line and every fired ordinary line with what the parser gave
(kind, fault, action, rule): for reading AFTER the unread score is recorded.
"""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultlens.parsing.registry import parser_for
from tools.log_corpus_score import read_rows

WHOLE_LOGS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "whole_logs"
OTHER = "other"  # an alert whose class is none of ours: neither a fault to catch nor an ordinary line
RECORD_TAIL = 3
FOLD_BACK = 8
FOLD_WINDOW = 64  # the parsers' fold window in lines (parsing/kernel_echoes.py FOLD_LINES, parsing/trainer_log.py CXX_FOLD_LINES)


@dataclass(frozen=True)
class Got:
    kind: str
    fault: str | None
    action: str | None
    rule: str | None
    unit: str | None = None  # what the event is on: its device (a disk, a GPU), else its rank

    @property
    def acts(self) -> bool:
        return self.action not in (None, "none")


@dataclass
class LogScore:
    lines: int = 0
    faults: int = 0
    right: int = 0
    alerted: int = 0
    ordinary: int = 0
    fired: int = 0
    other: int = 0
    other_fired: int = 0
    by_class: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    misses: list[dict[str, Any]] = field(default_factory=list)

    def add(self, o: LogScore) -> None:
        for k in ("lines", "faults", "right", "alerted", "ordinary", "fired", "other", "other_fired"):
            setattr(self, k, getattr(self, k) + getattr(o, k))
        for c, n in o.by_class.items():
            self.by_class[c].update(n)
        self.misses.extend(o.misses)

    def as_dict(self) -> dict[str, Any]:
        def frac(a: int, b: int) -> float | None:
            return round(a / b, 3) if b else None

        return {
            "lines": self.lines,
            "faults": self.faults,
            "right": self.right,
            "right_frac": frac(self.right, self.faults),
            "alerted": self.alerted,
            "alerted_frac": frac(self.alerted, self.faults),
            "ordinary": self.ordinary,
            "fired": self.fired,
            "fired_per_1000": round(1000 * self.fired / self.ordinary, 2) if self.ordinary else None,
            "other": self.other,
            "other_fired": self.other_fired,
        }


def feed(lines: list[str], source: str, strip: str = "") -> list[list[Got]]:
    """What the parser gave on each line (index i: line i+1), the log fed as one stream, in order;
    what a final flush gives is put on the last line."""
    parser = parser_for(source)
    cut = re.compile(strip) if strip else None
    out: list[list[Got]] = []
    for line in lines:
        text = cut.sub("", line, count=1) if cut else line
        out.append([_got(p) for p in parser.feed(text)])
    if out:
        out[-1].extend(_got(p) for p in parser.flush())
    return out


def _got(p: Any) -> Got:
    d = p.data
    unit = d.get("device") if d.get("device") is not None else (f"rank {d['rank']}" if d.get("rank") is not None else None)
    return Got(p.kind, d.get("fault"), d.get("action"), d.get("rule"), None if unit is None else str(unit))


def _alone_units(want: str, text: str, source: str, strip: str) -> list[str]:
    """The units (device, else rank) of the events of class ``want`` that ``text`` gives read alone by a fresh parser."""
    return [u for u in (g.unit for g in feed([text], source, strip)[0] if g.fault == want) if u is not None]


def _window(n: int, labels: dict[int, str]) -> range:
    """Line numbers whose events may speak for labelled line ``n``: its burst's head to its record's tail."""
    head = n
    while head - 1 in labels and labels[head - 1] == labels[n] and n - (head - 1) <= FOLD_BACK:
        head -= 1
    return range(head, n + RECORD_TAIL + 1)


def score_log(lines: list[str], labels: dict[int, str], source: str, strip: str = "", name: str = "") -> LogScore:
    got = feed(lines, source, strip)
    s = LogScore(lines=len(lines))
    # (round 47) the last line an event of (class, unit) came on, or a labelled line folded into one: the parsers'
    # fold memory, refreshed by each line it folds (a heartbeat's line every second, one event for its burst)
    last: dict[tuple[str | None, str], int] = {}
    for n, events in enumerate(got, 1):
        for g in events:
            if g.unit is not None:
                last[(g.fault, g.unit)] = n
        want = labels.get(n)
        fired = [g for g in events if g.acts]
        if want is None:
            s.ordinary += 1
            if fired:
                s.fired += 1
                s.by_class[fired[0].fault or "none"]["ordinary_fired"] += 1
                s.misses.append(
                    {"log": name, "line": n, "ordinary_fired": [g.__dict__ for g in fired], "text": lines[n - 1][:300]}
                )
            continue
        if want == OTHER:
            s.other += 1
            s.other_fired += bool(fired)
            continue
        near = [g for m in _window(n, labels) if 0 < m <= len(got) for g in got[m - 1]]
        right = any(g.fault == want for g in near)
        if not right:
            # read alone the line is of its class on a unit, and an event of that class on the same unit (or a line
            # folded into one) came within FOLD_WINDOW lines before it: the parser folded it into that burst's event,
            # one burst one event by design, whatever unlabelled lines came between (a dm target's debug lines among a
            # disk's failed writes, other ranks' lines among one rank's dump)
            units = _alone_units(want, lines[n - 1], source, strip)
            right = any(n - last.get((want, u), -FOLD_WINDOW - 1) <= FOLD_WINDOW for u in units)
            for u in units if right else ():
                last[(want, u)] = n
        alerted = any(g.acts for g in near)
        s.faults += 1
        s.right += right
        s.alerted += alerted
        s.by_class[want].update(faults=1, right=int(right), alerted=int(alerted))
        if not right:
            s.misses.append({"log": name, "line": n, "want": want, "got": [g.__dict__ for g in near], "text": lines[n - 1][:300]})
    return s


def manifest(folder: Path) -> list[dict[str, Any]]:
    return tomllib.loads((folder / "manifest.toml").read_text(encoding="utf-8"))["log"]


def labels_of(folder: Path, name: str) -> dict[int, str]:
    return {int(r["line"]): str(r["fault"]) for r in read_rows(folder / f"{name}.labels.jsonl")}


def log_lines(folder: Path, entry: dict[str, Any]) -> list[str]:
    """The file's lines as the agent's follower splits them (collectors/file_follower.py): at each
    newline, a CRLF's carriage return dropped, a lone one (a progress bar's) kept inside its line.
    Bytes no UTF-8 gives become U+FFFD, as there."""
    with open(folder / entry["file"], encoding="utf-8", errors="replace", newline="") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the file ends its last line
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def score_folder(folder: Path = WHOLE_LOGS, only: Collection[str] = ()) -> tuple[LogScore, dict[str, LogScore]]:
    """Every log of the manifest, or those named in ``only``."""
    total, per_log = LogScore(), {}
    for entry in manifest(folder):
        name = entry["name"]
        if only and name not in only:
            continue
        s = score_log(log_lines(folder, entry), labels_of(folder, name), entry["source"], entry.get("strip", ""), name)
        per_log[name] = s
        total.add(s)
    return total, per_log


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "folder", nargs="?", type=Path, default=WHOLE_LOGS, help="a folder with manifest.toml (default: the fixtures)"
    )
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="score only this log (repeatable)")
    ap.add_argument("--misses", action="store_true", help="print every missed fault line and every fired ordinary line")
    args = ap.parse_args(argv)
    total, per_log = score_folder(args.folder, args.only)
    for name, s in per_log.items():
        print(json.dumps({"log": name, **s.as_dict()}))
    for cls, n in sorted(total.by_class.items()):
        print(json.dumps({"class": cls, **n}))
    print(json.dumps({"total": True, "logs": len(per_log), **total.as_dict()}))
    if args.misses:
        for m in total.misses:
            print(json.dumps(m, ensure_ascii=False)[:600])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
