"""The line model's training material: the real-line corpus (tests/fixtures/log_corpus/*.jsonl,
each row with its provenance), the opened fresh batches (fresh1..OPENED_BATCHES: thousands of real
fault lines and healthy look-alikes from hundreds of sources) and the shipped tables' examples,
grouped by the source they came from, so a model can be trained without one source and scored on it
(bench/bench_log_recognition.py).

``faultlens parse --train-model`` retrains the shipped model from all of it. The held-out folder
(tests/fixtures/log_corpus/heldout) and the sealed batches are never read here: they judge, they do
not teach.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from faultlens.parsing import line_model

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "log_corpus"
# The fresh batches read to write rules so far (issue 54): the later ones are sealed, collected and
# scored unread, and nothing but their scoring may read them (a test that feeds every corpus line
# prints lines when it fails). Raise it when a batch is opened.
OPENED_BATCHES = 91


# The whole-log batches (tests/fixtures/whole_logs/freshN) opened so far: whole logs are numbered apart from
# the line batches, so their fresh1 is sealed while the line corpus's fresh1 has long been open.
OPENED_WHOLE_LOG_BATCHES = 2


def sealed(path: Path) -> bool:
    """Whether ``path`` lies in a sealed fresh batch: ``freshN`` with N above OPENED_BATCHES, or, under
    a ``whole_logs`` folder, above OPENED_WHOLE_LOG_BATCHES."""
    opened = OPENED_BATCHES
    for part in path.parts:
        if part == "whole_logs":
            opened = OPENED_WHOLE_LOG_BATCHES
        elif part.startswith("fresh") and part[5:].isdigit() and int(part[5:]) > opened:
            return True
    return False


def open_files(corpus: Path = CORPUS) -> list[Path]:
    """Every corpus file a test or bench may read line by line: all but the sealed batches'."""
    return [p for p in sorted(corpus.rglob("*.jsonl")) if not sealed(p.relative_to(corpus))]
_REPO = re.compile(r"^(?:https?://github\.com/)?([A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*?)(?:@|\s|/(?:issues|pull|blob|tree|discussions)\b|$)")


@dataclass(frozen=True)
class Sample:
    source: str  # kernel / nccl
    line: str
    label: str  # a fault class or "healthy"
    origin: str  # where it came from: a repository (owner/name) or the corpus file


def origin_of(provenance: str, file: str) -> str:
    """The repository a provenance names (``leptonai/gpud@4a8de33a ...``, a GitHub URL), else the file."""
    m = _REPO.match((provenance or "").strip())
    return m.group(1).lower() if m else file


def read_rows(corpus: Path = CORPUS) -> dict[str, list[dict[str, Any]]]:
    """The corpus files' rows by file name (top folder only: the held-out folder stays out)."""
    out = {}
    for path in sorted(corpus.glob("*.jsonl")):
        out[path.name] = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines() if text.strip()]
    return out


def opened_rows(corpus: Path = CORPUS) -> dict[str, list[dict[str, Any]]]:
    """The opened fresh batches' rows by file (``freshN/name.jsonl``), N from 1 to OPENED_BATCHES."""
    out = {}
    for n in range(1, OPENED_BATCHES + 1):
        for path in sorted((corpus / f"fresh{n}").glob("*.jsonl")):
            out[f"fresh{n}/{path.name}"] = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines() if text.strip()]
    return out


def samples(corpus: Path = CORPUS, *, tables: bool = True, opened: bool = True) -> list[Sample]:
    """The training samples: the corpus's top folder, the opened batches (``opened``; issue 54 round
    21: replaying rounds 16-19 with them, the next unread pair read 570 -> 578 of 657 right, 15 of 855
    healthy fired as before) and the tables' examples (``tables``)."""
    out = []
    files = {**read_rows(corpus), **(opened_rows(corpus) if opened else {})}
    for name, rows in files.items():
        for row in rows:
            for source, line, label in line_model.corpus_samples([row]):
                out.append(Sample(source, line, label, origin_of(row.get("provenance", ""), name)))
    if tables:
        out.extend(Sample(source, line, label, origin_of(prov, "tables")) for source, line, label, prov in line_model.table_samples())
    return out


def train(items: Iterable[Sample]) -> line_model.LineModel:
    return line_model.train([(s.source, s.line, s.label) for s in items])


def retrain_shipped(corpus: Path = CORPUS, out: Path = line_model.SHIPPED) -> line_model.LineModel:
    """Train on everything and write the shipped model (``faultlens parse --train-model``)."""
    model = train(samples(corpus))
    line_model.save(model, out)
    return model
