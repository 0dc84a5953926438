"""Backtest a general fallback decision on the fresh pairs as they were met unread (issue 54).

    python -m tools.fallback_backtest POOLS [--half design|validate|all] [--candidate NAME ...] [--rows]
                                            [--models DIR --recipe NAME]

POOLS is a folder of ``unread_fresh<N>_<M>_<commit8>.txt`` files: ``tools.log_corpus_score --misses``
of the opened pair fresh N+M on the code of ``<commit>``, the last commit before the round that opened
the pair. Its fault rows with ``"got": []`` are the pair's no-event misses at that commit; the pair's
healthy rows (tests/fixtures/log_corpus/freshN) less the ones that fired there are its quiet healthy
rows. A candidate is a decision layered on what that commit already found: a gate (which lines reach
the model) and a reading of the model's probabilities, with the model that commit shipped
(``git show <commit>:parsing/line_model.pkl.gz``), so no candidate sees the pair or anything later;
with ``--models DIR`` one retrained on that commit's own corpus by a recipe (tools/fallback_retrain.py
writes DIR/<commit8>_<recipe>.pkl), the healthy rows' reference still the shipped model's reading.

Printed per pair and pooled per half: no-event misses caught with the right class, caught with a
wrong class, and quiet healthy rows newly fired. The halves split by time: design on pairs 29+30 ..
45+46, validate on 47+48 .. 55+56 (read once, after the design is fixed).

A pool is made in a ``git worktree add --detach`` of the commit: ``python -m tools.log_corpus_score
--misses tests/fixtures/log_corpus/freshN tests/fixtures/log_corpus/freshM`` run there (the worktree's
own parsers and model). A sealed batch (above parsing.line_corpus.OPENED_BATCHES) is refused.

Approximations: the gate and the fallback's filters are today's (parsing.alarm, parsing.severity,
parsing.fallback), not the commit's; a healthy row today's reading fires too was kept quiet at the
commit before the fallback (a rule, the benign table) and is not counted as newly fired. A pool line
cut at 400 characters whose ``got`` is lost is left out and counted (``cut``). No network; reads git
and the opened fixtures only.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultlens.parsing import fallback, line_corpus, line_model
from faultlens.parsing.alarm import looks_alarming
from faultlens.parsing.needles import NeedleScan, scan
from faultlens.parsing.severity import NOTICE, WARNING, reassured, says_retrying, severity_of, trainer_level
from faultlens.parsing.subsystems import attribute, by_program
from faultlens.parsing.timestamps import program_of, split_timestamp

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fixtures" / "log_corpus"
_POOL = re.compile(r"^unread_fresh(\d+)_(\d+)_([0-9a-f]{8})\.txt$")
# The time split: pairs up to this first batch number are design, later ones validation.
DESIGN_LAST = 45

Probs = tuple[float, ...]
Decide = Callable[[Probs, tuple[str, ...]], "str | None"]
Gate = Callable[[str, str, str], bool]


@dataclass
class Pair:
    first: int
    second: int
    commit: str
    misses: list[dict[str, Any]]  # fault rows with no event at the commit
    healthy: list[dict[str, Any]]  # healthy rows quiet at the commit
    cut: int = 0  # pool lines cut before their "got"

    @property
    def name(self) -> str:
        if self.second > self.first + 1:
            return f"fresh{self.first}-{self.second}"
        return f"fresh{self.first}+{self.second}" if self.second != self.first else f"fresh{self.first}"


@dataclass
class Tally:
    misses: int = 0
    right: int = 0
    wrong: int = 0
    healthy: int = 0
    fired: int = 0
    caught: list[str] = field(default_factory=list)
    firings: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        for k in ("misses", "right", "wrong", "healthy", "fired"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.caught += other.caught
        self.firings += other.firings

    def line(self) -> dict[str, Any]:
        return {"misses": self.misses, "right": self.right, "wrong": self.wrong, "healthy": self.healthy, "fired": self.fired}


# -- the pools ---------------------------------------------------------------------------------------
def _pair_rows(n: int) -> list[dict[str, Any]]:
    out = []
    for path in sorted((CORPUS / f"fresh{n}").glob("*.jsonl")):
        out += [json.loads(t) for t in path.read_text(encoding="utf-8").splitlines() if t.strip()]
    return out


def _commit(short: str) -> str:
    return subprocess.run(["git", "rev-parse", short], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def load_pair(path: Path) -> Pair:
    m = _POOL.match(path.name)
    if m is None:
        raise ValueError(f"{path}: not an unread_fresh<N>_<M>_<commit8>.txt pool")
    first, second = int(m.group(1)), int(m.group(2))
    if max(first, second) > line_corpus.OPENED_BATCHES:
        raise ValueError(
            f"{path}: fresh{max(first, second)} is sealed (OPENED_BATCHES {line_corpus.OPENED_BATCHES}): not read here"
        )
    # A pool may hold a run of batches (unread_fresh59_62_*: fresh59..62, opened together).
    rows = [r for n in range(first, max(first, second) + 1) for r in _pair_rows(n)]
    # A pool row is its fixture row's JSON with "got" appended (cut at 400 characters): matched by that text.
    keyed = [(json.dumps(r, ensure_ascii=False)[:-1], r) for r in rows]
    misses, fired, cut = [], [], 0
    for text in path.read_text(encoding="utf-8").splitlines():
        if text.startswith(('{"file"', '{"class"', '{"total"')) or not text.strip():
            continue
        whole = text.endswith("}") and '"got": ' in text
        found = [r for k, r in keyed if (text.startswith(k + ', "got": ') if whole else k.startswith(text) or text.startswith(k))]
        if not found:
            raise ValueError(f"{path}: no fixture row of the pair for {text[:120]}")
        row = found[0]
        if row.get("healthy"):
            fired.append(row)
        elif not whole:
            cut += 1
        elif json.loads(text)["got"] == []:
            misses.append(row)
    healthy = [r for r in rows if r.get("healthy") and not any(r is f for f in fired)]
    return Pair(first, second, _commit(m.group(3)), misses, healthy, cut)


def shipped_model(commit: str) -> line_model.LineModel:
    blob = subprocess.run(
        ["git", "show", f"{commit}:parsing/line_model.pkl.gz"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    loaded = line_model._BuiltinsOnly(io.BytesIO(gzip.decompress(blob))).load()
    return line_model.LineModel(loaded["model"], loaded["meta"])


# -- candidates --------------------------------------------------------------------------------------
def gate_today(msg: str, raw: str, source: str) -> bool:
    """What reaches the model in today's parsers: a kernel line its severity calls an error, a trainer
    line that looks alarming and does not say it recovered."""
    if source == "kernel":
        return severity_of(msg, raw).is_error
    return looks_alarming(msg) and not reassured(msg)


def top_over(threshold: float) -> Decide:
    """The top class when it is a fault with at least ``threshold`` (today's reading at 0.6)."""

    def decide(p: Probs, classes: tuple[str, ...]) -> str | None:
        best = max(range(len(p)), key=p.__getitem__)
        return classes[best] if classes[best] != line_model.HEALTHY and p[best] >= threshold else None

    return decide


def fault_mass(threshold: float, top_share: float = 0.0) -> Decide:
    """The top fault class when all fault classes together hold ``threshold`` and the top one at least
    ``top_share`` of that mass."""

    def decide(p: Probs, classes: tuple[str, ...]) -> str | None:
        faults = [i for i, c in enumerate(classes) if c != line_model.HEALTHY]
        mass = sum(p[i] for i in faults)
        best = max(faults, key=p.__getitem__)
        return classes[best] if mass >= threshold and p[best] >= top_share * mass else None

    return decide


def margin_over_healthy(margin: float, floor: float = 0.0) -> Decide:
    """The top fault class when it leads ``healthy`` by ``margin`` and holds ``floor``."""

    def decide(p: Probs, classes: tuple[str, ...]) -> str | None:
        h = classes.index(line_model.HEALTHY)
        best = max((i for i in range(len(p)) if i != h), key=p.__getitem__)
        return classes[best] if p[best] - p[h] >= margin and p[best] >= floor else None

    return decide


# General words of a state gone wrong (never a line's text): the candidates that widen the gate.
STATE_WORDS = re.compile(
    r"(?i)\b(?:not found|no \w+(?: \w+)? found|missing|cannot|can ?not|could not|couldn.t|inactive|killed|overflow|unreachable|"
    r"invalid|denied|mismatch|unexpected|not present|unavailable|unsupported|illegal|exceeded|expired|dead|disabled|"
    r"not (?:ready|supported|responding|available|detected)|no such|bad|errno|err)\b|_ERR\b"
)
STATE_WORDS_NARROW = re.compile(
    r"(?i)\b(?:not found|no \w+(?: \w+)? found|missing|cannot|can ?not|could not|couldn.t|inactive|killed|overflow|unreachable)\b"
)


@dataclass(frozen=True)
class Candidate:
    """Where the model is asked and how its probabilities are read. ``gated``: a line today's gate
    (or ``words``) passes, no subsystem's; ``ungated``: a line no gate passes whose own level is not
    notice or below (None: not asked); ``unclassed``: an error line of a driver the subsystem table
    names without a class (None: not asked, today's rule)."""

    name: str
    gated: Decide
    ungated: Decide | None = None
    unclassed: Decide | None = None
    words: re.Pattern[str] | None = None
    # ``ungated`` only for a kernel line of a subsystem with a class of the job's (the model as that line's gate).
    classed_only: bool = False
    # ``unclassed`` yields to the catalogue: not on a line holding a kernel rule's needle (the commit's rules).
    yields: bool = False


CANDIDATES = {c.name: c for c in (
    Candidate("today", top_over(0.6)),
    Candidate("top>=0.5", top_over(0.5)),
    Candidate("top>=0.4", top_over(0.4)),
    Candidate("mass>=0.6", fault_mass(0.6)),
    Candidate("mass>=0.6,share0.5", fault_mass(0.6, 0.5)),
    Candidate("margin0.1", margin_over_healthy(0.1)),
    Candidate("margin0.0,floor0.4", margin_over_healthy(0.0, 0.4)),
    Candidate("narrow-words", top_over(0.6), words=STATE_WORDS_NARROW),
    Candidate("words", top_over(0.6), words=STATE_WORDS),
    Candidate("words,0.5", top_over(0.5), words=STATE_WORDS),
    Candidate("ungated>=0.9", top_over(0.6), ungated=top_over(0.9)),
    Candidate("ungated>=0.8", top_over(0.6), ungated=top_over(0.8)),
    Candidate("ungated>=0.7", top_over(0.6), ungated=top_over(0.7)),
    Candidate("ungated>=0.6", top_over(0.6), ungated=top_over(0.6)),
    Candidate("unclassed>=0.8", top_over(0.6), unclassed=top_over(0.8)),
    Candidate("unclassed>=0.7", top_over(0.6), unclassed=top_over(0.7)),
    Candidate("unclassed>=0.6", top_over(0.6), unclassed=top_over(0.6)),
    Candidate("unclassed>=0.7,yields", top_over(0.6), unclassed=top_over(0.7), yields=True),
    Candidate("unclassed>=0.7,ungated>=0.8", top_over(0.6), ungated=top_over(0.8), unclassed=top_over(0.7)),
    Candidate("classed-ungated>=0.8", top_over(0.6), ungated=top_over(0.8), classed_only=True),
    Candidate("classed-ungated>=0.9", top_over(0.6), ungated=top_over(0.9), classed_only=True),
    Candidate("unclassed>=0.7,ungated>=0.9", top_over(0.6), ungated=top_over(0.9), unclassed=top_over(0.7)),
    Candidate("unclassed>=0.8,ungated>=0.9", top_over(0.6), ungated=top_over(0.9), unclassed=top_over(0.8)),
    Candidate("unclassed>=0.7,words", top_over(0.6), unclassed=top_over(0.7), words=STATE_WORDS),
)}  # fmt: skip
TODAY = CANDIDATES["today"]


def catalogue_needles(commit: str) -> NeedleScan:
    """The needles of the kernel's rules in ``commit``'s catalogue (its rules.toml, read as TOML)."""
    text = subprocess.run(
        ["git", "show", f"{commit}:parsing/rules.toml"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    rules = tomllib.loads(text).get("rule", ())
    return scan(frozenset(n for r in rules if r.get("source", "kernel") in ("kernel", "any") for n in r.get("needles", ())))


def reading(cand: Candidate, model: line_model.LineModel, raw: str, source: str, needles: NeedleScan | None = None) -> str | None:
    """The class the candidate gives a line no rule took at the commit (None: none), behind today's
    fallback filters (the line's own level, retrying, a daemon's or a login's line, ...)."""
    msg = split_timestamp(raw).message
    if says_retrying(msg) or reassured(msg):
        return None
    gated = gate_today(msg, raw, source) or bool(cand.words and cand.words.search(msg))
    if source == "kernel":
        sev = severity_of(msg, raw)
        if sev.priority is not None and sev.priority >= NOTICE:
            return None  # the line's own level says information: never asked
        att = attribute(msg)
        if att is None or att.fault is None:
            att = by_program(program_of(raw)) or att
        if att is not None and att.fault is not None:
            # A subsystem with a class: its error lines are the subsystem path's (an event at the commit).
            decide = None if gate_today(msg, raw, source) or att.fault == "unknown" else cand.ungated
        elif att is not None:
            left = cand.yields and needles is not None and needles.pattern.search(msg) is not None
            decide = cand.unclassed if gated and fallback.names_a_driver(att) and not left else None
        else:
            decide = cand.gated if gated else (None if cand.classed_only else cand.ungated)
    else:
        if trainer_level(msg) in (WARNING, NOTICE, 6, 7) or by_program(program_of(raw)) is not None:
            return None
        decide = cand.gated if gated else (None if cand.classed_only else cand.ungated)
    if decide is None:
        return None
    fault = decide(model.proba(f"{source} {line_model.normalise(msg)}"), model.classes)
    if fault is None or fallback._guess_unfounded(fault, msg, raw):
        return None
    return fault


def row_reading(
    cand: Candidate, model: line_model.LineModel, row: dict[str, Any], needles: NeedleScan | None = None
) -> str | None:
    for raw in row.get("lines") or [row["line"]]:
        got = reading(cand, model, raw, row.get("source", "kernel"), needles)
        if got:
            return got
    return None


def score_pair(
    cand: Candidate,
    model: line_model.LineModel,
    pair: Pair,
    needles: NeedleScan | None = None,
    shipped: line_model.LineModel | None = None,
) -> Tally:
    """``shipped``: the commit's shipped model, when ``model`` is a retrained one (what was quiet there is read by it)."""
    t = Tally(misses=len(pair.misses), healthy=len(pair.healthy))
    for row in pair.misses:
        got = row_reading(cand, model, row, needles)
        if got == row.get("fault") or (got and row.get("fault") is None):
            t.right += 1
            t.caught.append(f"{pair.name} right {got}: {(row.get('line') or ' | '.join(row['lines']))[:150]}")
        elif got:
            t.wrong += 1
            t.caught.append(
                f"{pair.name} WRONG {got} (is {row.get('fault')}): {(row.get('line') or ' | '.join(row['lines']))[:150]}"
            )
    for row in pair.healthy:
        got = row_reading(cand, model, row, needles)
        # A row today's reading fires too was kept quiet at the commit before the fallback (a rule, the
        # benign table, a program's own handling): no candidate of the fallback meets it there.
        if got and not row_reading(TODAY, shipped or model, row):
            t.fired += 1
            t.firings.append(f"{pair.name} FIRED {got}: {(row.get('line') or ' | '.join(row['lines']))[:150]}")
    return t


def pairs(pools: Path, half: str) -> list[Pair]:
    out = [load_pair(p) for p in sorted(pools.glob("unread_fresh*_*_*.txt"), key=lambda p: int(_POOL.match(p.name).group(1)))]
    if half == "design":
        return [p for p in out if p.first <= DESIGN_LAST]
    if half == "validate":
        return [p for p in out if p.first > DESIGN_LAST]
    return out


def retrained_model(folder: Path, commit: str, recipe: str) -> line_model.LineModel:
    """A model retrained on ``commit``'s own corpus with ``recipe``: ``folder/<commit8>_<recipe>.pkl``, the exported
    numbers (parsing.line_scorer.export) pickled, made in a worktree of the commit by its own line_corpus.samples()."""
    with (folder / f"{commit[:8]}_{recipe}.pkl").open("rb") as f:
        exported = line_model._BuiltinsOnly(f).load()
    return line_model.LineModel(exported, {"recipe": recipe})


def run(pools: Path, half: str, names: Iterable[str], show_rows: bool, models_from: tuple[Path, str] | None = None) -> None:
    chosen = list(pairs(pools, half))
    shipped = {p.commit: shipped_model(p.commit) for p in chosen}
    models = (
        shipped
        if models_from is None
        else {p.commit: retrained_model(*models_from[:1], p.commit, models_from[1]) for p in chosen}
    )
    needles = {p.commit: catalogue_needles(p.commit) for p in chosen}
    for p in chosen:
        print(
            json.dumps(
                {
                    "pair": p.name,
                    "commit": p.commit[:8],
                    "no_event_misses": len(p.misses),
                    "quiet_healthy": len(p.healthy),
                    "cut": p.cut,
                }
            )
        )
    for name in names:
        cand = CANDIDATES[name]
        pooled = Tally()
        for p in chosen:
            t = score_pair(cand, models[p.commit], p, needles[p.commit], shipped[p.commit])
            pooled.add(t)
            print(json.dumps({"candidate": name, "pair": p.name, **t.line()}))
        print(json.dumps({"candidate": name, "pooled": half, **pooled.line()}))
        if show_rows:
            for text in pooled.caught + pooled.firings:
                print("   ", text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pools", type=Path, help="folder of unread_fresh<N>_<M>_<commit8>.txt pools")
    ap.add_argument("--half", choices=("design", "validate", "all"), default="design", help="which pairs (default: design)")
    ap.add_argument("--candidate", action="append", choices=sorted(CANDIDATES), help="candidates to score (default: all)")
    ap.add_argument("--rows", action="store_true", help="print each caught miss and each newly fired healthy row")
    ap.add_argument("--models", type=Path, help="read retrained models, DIR/<commit8>_<recipe>.pkl, instead of the shipped ones")
    ap.add_argument("--recipe", default="base", help="the recipe of --models (default: base)")
    args = ap.parse_args(argv)
    run(args.pools, args.half, args.candidate or list(CANDIDATES), args.rows, (args.models, args.recipe) if args.models else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
