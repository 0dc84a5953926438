"""Score the parsers on the real-line corpus (tests/fixtures/log_corpus).

    python -m tools.log_corpus_score [PATH ...] [--heldout | --mined] [--by-source] [--misses]

PATH is a folder (its *.jsonl, not its subfolders) or one .jsonl file; with no PATH the
development set is scored: every *.jsonl directly under tests/fixtures/log_corpus. ``--heldout``
scores only tests/fixtures/log_corpus/heldout (sources nobody may read to write rules: see its
README.md); ``--mined`` only the files the rules were built from (MINED, the set whose score
tests/parsing/test_log_corpus.py holds).

Each row is one record from a public source: ``line`` (or ``lines`` for a record the kernel
spreads over several), ``source`` (kernel / nccl), ``provenance``, and what it must give:
``fault`` (a fault class, or null for "any"), ``action`` (optional: the first action it must carry),
``xid`` (the Xid number an event must carry), or ``healthy: true`` (alarming-looking but fine: no
event may act). Every row is parsed by a fresh parser, so rows never fold into each other.

Printed, one JSON object a line: per file, per class, per source (the provenance's repository or
report, with ``--by-source``) and in total, the fraction of fault rows classified (some event),
with the right class, Xid rows with the right number, and healthy rows that fired.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultlens.parsing.registry import parser_for

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "log_corpus"
HELDOUT = CORPUS / "heldout"
# The files the rules were written from (the peers' test inputs, the public reports mined while
# writing them, the first healthy set). Their score is what test_log_corpus holds; the other
# top-level files are the development set gathered later from sources never mined.
MINED = ("gpud.jsonl", "gpud_fabric_manager.jsonl", "healthy.jsonl", "node_problem_detector.jsonl",
         "nvidia_resiliency_ext.jsonl", "nvsentinel.jsonl", "public_reports.jsonl")


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

    def add(self, other: Score) -> None:
        for k in ("faults", "classified", "class_right", "xids", "xid_right", "healthy", "fired"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.misses.extend(other.misses)

    def as_dict(self) -> dict[str, Any]:
        def frac(a: int, b: int) -> float | None:
            return round(a / b, 3) if b else None

        return {"faults": self.faults, "class_right_n": self.class_right, "classified": frac(self.classified, self.faults),
                "class_right": frac(self.class_right, self.faults), "xids": self.xids, "xid_right": frac(self.xid_right, self.xids),
                "healthy": self.healthy, "healthy_fired": self.fired}


def corpus_files(path: Path) -> list[Path]:
    """A file is itself; a folder is its *.jsonl, not its subfolders' (the held-out set stays out)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"no corpus file or folder at {path}")
    return sorted(path.glob("*.jsonl"))


def read_rows(path: Path) -> list[dict[str, Any]]:
    out = []
    for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not a JSON object: {e}") from e
        if not isinstance(row, dict):
            raise TypeError(f"{path}:{n}: not a JSON object")
        out.append(row)
    return out


def rows(corpus: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Rows by file name. No argument: the MINED files (the set test_log_corpus holds)."""
    files = [CORPUS / n for n in MINED] if corpus is None else corpus_files(corpus)
    return {p.name: read_rows(p) for p in files}


def dev_rows() -> dict[str, list[dict[str, Any]]]:
    return rows(CORPUS)


def heldout_rows() -> dict[str, list[dict[str, Any]]]:
    return rows(HELDOUT)


# An issue or pull request whatever the address's spelling (scheme or none, www. or none) or its short form 'o/r#N'.
_GITHUB = re.compile(r"(?:https?://)?(?:www\.)?github\.com/([^/\s]+/[^/\s]+)/(?:issues|pull)/(\d+)|([\w.\-]+/[\w.\-]+)#(\d+)\b")
# A paste whatever the view it was read through (its page, raw text, download): one paste, keyed as its page.
_PASTEBIN = re.compile(r"(?:https?://)?(?:www\.)?pastebin\.com/(?:(?:raw|dl|embed_js|print)/)?(\w+)\b")
# An indexed file is its id: 'public GitHub file, index id N', '... search-index id N', 'index id N'.
_INDEXED = re.compile(r"(?:public GitHub file, )?(?:search-)?index id (\d+)\b")


def source_of(row: dict[str, Any]) -> str:
    """The repository or report a row came from: 'owner/repo' for a file of a repository at a
    commit, 'owner/repo#N' for an issue or pull request, 'https://pastebin.com/X' for a paste, else the
    provenance up to any remark."""
    prov = str(row.get("provenance", ""))
    m = _INDEXED.match(prov)
    if m:  # one indexed file whatever its provenance calls the index (R14: two spellings, one file)
        return f"public GitHub file, index id {m.group(1)}"
    m = _GITHUB.match(prov)
    if m:  # one thread however its address is spelled (round 23: www., no scheme, 'o/r#N')
        return f"{m.group(1) or m.group(3)}#{m.group(2) or m.group(4)}"
    m = _PASTEBIN.match(prov)
    if m:  # one paste whichever view of it was read (round 23: /raw/X and /X)
        return f"https://pastebin.com/{m.group(1)}"
    if "@" in prov.split(" ")[0] and "://" not in prov:
        return prov.split("@")[0]
    return prov.split(" (")[0]


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


def class_of(row: dict[str, Any]) -> str:
    return "healthy" if row.get("healthy") else row.get("fault") or ("xid" if "xid" in row else "any")


@dataclass
class Report:
    total: Score
    by_file: dict[str, Score]
    by_class: dict[str, Score]
    by_source: dict[str, Score]


def score_rows(files: dict[str, list[dict[str, Any]]]) -> Report:
    total = Score()
    by_file: defaultdict[str, Score] = defaultdict(Score)
    by_class: defaultdict[str, Score] = defaultdict(Score)
    by_source: defaultdict[str, Score] = defaultdict(Score)
    for name, rs in files.items():
        for row in rs:
            s = score_row(row)
            total.add(s)
            by_file[name].add(s)
            by_class[class_of(row)].add(s)
            by_source[source_of(row)].add(s)
    return Report(total, dict(by_file), dict(by_class), dict(by_source))


def score(corpus: Path | None = None) -> tuple[Score, dict[str, Score], dict[str, Score]]:
    """Total, per file and per class; no argument: the MINED files."""
    r = score_rows(rows(corpus))
    return r.total, r.by_file, r.by_class


def _merge(paths: Iterable[Path]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        for p in corpus_files(path):
            p = p.resolve()
            out[str(p.relative_to(CORPUS)) if p.is_relative_to(CORPUS) else str(p)] = read_rows(p)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", type=Path, help="corpus folders or .jsonl files (default: the development set)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--heldout", action="store_true", help="score only the held-out folder")
    which.add_argument("--mined", action="store_true", help="score only the files the rules were built from")
    ap.add_argument("--by-source", action="store_true", help="print a line per source (provenance repository or report)")
    ap.add_argument("--misses", action="store_true", help="print every row that missed")
    args = ap.parse_args(argv)
    if args.heldout:
        files = _merge([HELDOUT])
    elif args.mined:
        files = _merge(CORPUS / n for n in MINED)
    else:
        files = _merge(args.paths or [CORPUS])
    r = score_rows(files)
    for name, s in r.by_file.items():
        print(json.dumps({"file": name, **s.as_dict()}))
    for name, s in sorted(r.by_class.items()):
        print(json.dumps({"class": name, **s.as_dict()}))
    if args.by_source:
        for name, s in sorted(r.by_source.items()):
            print(json.dumps({"source": name, **s.as_dict()}))
    print(json.dumps({"total": True, "files": len(r.by_file), "sources": len(r.by_source), **r.total.as_dict()}))
    if args.misses:
        for m in r.total.misses:
            print(json.dumps(m, ensure_ascii=False)[:400])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
