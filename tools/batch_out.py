"""Leave one fresh batch out: what a general mechanism (the line model) does on batch k when it was
built without batch k, through the parsers batch k first met (issue 54, round 12).

    python -m tools.batch_out [--batches 1-12] [--future 13] [--variants shipped,fresh,...] [--misses]
                              [--overlay app.,segfault:app_fault] [--by-class] [--cross]

Each fresh batch k (tests/fixtures/log_corpus/freshK) was first scored unread on the code frozen
before it (FROZEN: the commit of its ``frozen_score_<commit>.txt``). Its rules are that code's
rules: the rules of today were mined from batch k itself, so only the frozen code is fair. A worker
(``--worker TREE DIR``, run inside a ``git archive`` of the frozen commit) parses every row of the
batch with that code and records, beside its events, every line the parsers asked the model about
(what the fallback consults: an alarming line no rule and no subsystem took).

Then, for each variant, a model is trained on the corpus, the tables' examples and every OTHER fresh
batch, all without any sample whose source (repository or page) batch k cites, and batch k's rows are
scored again: the frozen rules' events, the frozen model's events replaced by this model's answers
to the same questions. A row is right when an event carries its class (and Xid); a healthy row fired
when an event acts. ``frozen`` is the frozen code with its own model: the table's first column.

Variants (their choices are made by this figure alone): ``shipped`` trains as the shipped model does
(corpus and tables only), ``fresh`` adds the other batches, ``+sev`` gives the model the line's own
level word and whether it has error words, ``+prog`` the syslog program or kernel subsystem. Each is
read at several abstention thresholds (a line whose best class is under it is recorded, not alerted).

``+all`` asks the model about every line of a row the frozen parsers neither took nor found alarming.

``--misses`` sorts the frozen misses of each batch by why they were missed (see ``why_missed``).

``--overlay TOKENS`` measures a mechanism of today's code the same fair way (round 14): each batch's
frozen events plus the events that mechanism alone makes (catalogue rules by id prefix, ``app.``,
each applied to every line on its own, as a rule mined later may take the line first today; a code
record by the class it now gives, ``segfault:app_fault``), so a change counts by what it catches on
batches it was not written from, and by what it fires. ``--by-class`` prints, per
class, the share right on first sight (frozen), with the overlay, and once mined (today's code).
``--cross`` asks what mined rules generalise: each batch's frozen code plus the catalogue rules that
were written from OTHER batches (by rules.toml's section headers), beside the rules written from it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fixtures" / "log_corpus"
TREES = Path("/tmp/batch_out_trees")
THRESHOLDS = (0.5, 0.6, 0.7, 0.8)
VARIANTS = ("shipped", "fresh", "fresh+sev", "fresh+sev+prog")


def frozen_commit(k: int) -> str:
    """The commit batch k was first scored on, unread: since fresh25 a batch also holds the score of the
    round after (frozen_score_<later>.txt), so of several the oldest commit (git's committer time) is it."""
    commits = [txt.stem.removeprefix("frozen_score_") for txt in (CORPUS / f"fresh{k}").glob("frozen_score_*.txt")]
    if len(commits) == 1:
        return commits[0]
    if not commits:
        raise FileNotFoundError(f"fresh{k} holds no frozen_score_<commit>.txt")
    return min(commits, key=lambda c: int(subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct", c],
                                                          capture_output=True, text=True, check=True).stdout))


# -- the worker: runs inside the frozen tree, imports only that tree's parsers --------------------------
def worker(tree: str, folder: str) -> None:
    sys.path.insert(0, tree)
    from faultlens.parsing import line_model
    from faultlens.parsing.registry import parser_for

    shipped = line_model.current()
    asked: list[list[Any]] = []
    raw_now = [""]

    class Recorder:
        """The frozen model, answering as before, with every question written down."""

        def guess(self, line: str, source: str = "kernel") -> Any:
            g = shipped.guess(line, source) if shipped is not None else None
            asked.append([line, source, raw_now[0], g.fault if g else None])
            return g

    line_model._override.append(Recorder())  # type: ignore[arg-type]  # guess() is all the parsers call
    for path in sorted(Path(folder).glob("*.jsonl")):
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if not text.strip():
                continue
            row = json.loads(text)
            asked.clear()
            parser = parser_for(row.get("source", "kernel"))
            events = []
            for line in row.get("lines") or [row["line"]]:
                raw_now[0] = line
                events.extend(parser.feed(line))
            events.extend(parser.flush())
            ev = [[e.kind, e.data.get("fault"), e.data.get("action"), e.data.get("xid"), e.data.get("basis")] for e in events]
            made_by = [e.data.get("rule") or e.kind for e in events]  # which rule (or code record) made each event
            print(json.dumps({"file": path.stem, "n": n, "row": row, "events": ev, "by": made_by, "asked": list(asked)}))


def frozen_rows(k: int) -> list[dict[str, Any]]:
    """Batch k parsed by its frozen code (cached beside the tree)."""
    commit = frozen_commit(k)
    tree = TREES / commit
    cache = TREES / f"fresh{k}.{commit}.jsonl"
    if not cache.exists():
        if not tree.is_dir():
            tree.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        out = subprocess.run([sys.executable, __file__, "--worker", str(tree), str(CORPUS / f"fresh{k}")], cwd=tree, check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        cache.write_text(out, encoding="utf-8")
    return [json.loads(t) for t in cache.read_text(encoding="utf-8").splitlines() if t.strip()]


def today_rows(k: int) -> list[dict[str, Any]]:
    """Batch k parsed by the code of this working tree (not cached: the code changes)."""
    out = subprocess.run([sys.executable, __file__, "--worker", str(ROOT), str(CORPUS / f"fresh{k}")], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return [json.loads(t) for t in out.splitlines() if t.strip()]


def in_mechanism(made_by: str, fault: str | None, tokens: list[str]) -> bool:
    """An event of today's code that a mechanism under study made: ``tokens`` name it by the rule id's
    prefix (``app.``), or by a code record and the class it now gives (``segfault:app_fault``)."""
    for t in tokens:
        name, _, cls = t.partition(":")
        if made_by.startswith(name) and (not cls or fault == cls):
            return True
    return False


def standalone(row: dict[str, Any], tokens: list[str]) -> list[list[Any]]:
    """The events the mechanism's catalogue rules (ids by prefix) give each line of ``row`` on their own:
    today a rule mined later may take the line first, which the frozen code did not have."""
    from faultlens.parsing.rules import shipped
    from faultlens.parsing.timestamps import split_timestamp

    source = row.get("source", "kernel")
    rules = [r for r in shipped() if r.applies_to(source) and any(in_mechanism(r.id, None, [t]) for t in tokens if ":" not in t)]
    out = []
    for line in row.get("lines") or [row["line"]]:
        msg = split_timestamp(line).message
        hit = next((r for r in rules if r.pattern.search(msg)), None)
        if hit is not None:
            out.append([hit.kind, hit.fault, hit.action, None, None])
    return out


def overlaid(frozen: dict[str, Any], today: dict[str, Any], tokens: list[str]) -> list[list[Any]]:
    """The frozen code's events plus those the mechanism alone makes: today's events it made (a code
    record by its class) and what its catalogue rules give each line on their own. What the frozen code
    would have done with only this mechanism added: it can add a right class or a firing, as the
    mechanism would; it takes nothing the frozen code had."""
    extra = [e for e, by in zip(today["events"], today.get("by", []), strict=True) if in_mechanism(by, e[1], tokens)]
    return frozen["events"] + extra + standalone(frozen["row"], tokens)


def rules_by_batch() -> dict[str, set[int]]:
    """Each catalogue rule written from named fresh batches (parsing/rules.toml's section headers since
    round 4: "fresh batch 3", "fresh batches 7 and 8", "fresh9 and fresh10", a range "fresh batches 17-22")
    -> those batches; rules of the first sections (rounds 1-3, and later additions there) have no batch named
    and are left out."""
    import re

    from faultlens.parsing.rules import SHIPPED

    out: dict[str, set[int]] = {}
    batches: set[int] = set()
    for text in SHIPPED.read_text(encoding="utf-8").splitlines():
        if text.startswith("# ----"):
            named = re.search(r"fresh ?(?:batch(?:es)? )?(\d+)(?:( and |-)(?:fresh ?)?(\d+))?", text)
            if named is None:
                batches = set()
            else:
                first, sep, last = named.groups()
                end = int(last) if last else int(first)
                batches = set(range(int(first), end + 1)) if sep == "-" else {int(first), end}
        elif batches and (m := re.match(r'id = "([^"]+)"', text)):
            out[m.group(1)] = set(batches)
    return out


def cross_overlaid(frozen: dict[str, Any], today: dict[str, Any], rules: set[str]) -> list[list[Any]]:
    """The frozen events plus today's events made by exactly these catalogue rules."""
    return frozen["events"] + [e for e, by in zip(today["events"], today.get("by", []), strict=True) if by in rules]


# -- judging a row ----------------------------------------------------------------------------------------
def judge(row: dict[str, Any], events: list[list[Any]]) -> tuple[bool, bool]:
    """(right, fired) as tools/log_corpus_score.score_row counts them."""
    if row.get("healthy"):
        return False, any(a not in ("none", None) for _, _, a, _, _ in events)
    want, act = row.get("fault"), row.get("action")
    right = any((want is None or f == want) and (act is None or a == act) for _, f, a, _, _ in events)
    if "xid" in row:
        right = right and any(x == row["xid"] for _, _, _, x, _ in events)
    return right, False


def rescored(r: dict[str, Any], answers: list[str | None]) -> tuple[bool, bool]:
    """The row with the frozen model's events replaced by ``answers`` to the same questions."""
    events = [e for e in r["events"] if e[4] != "model"]
    events += [["suspect_line", a, "alert", None, "model"] for a in answers if a]
    return judge(r["row"], events)


# -- the model's features -------------------------------------------------------------------------------------
def extra_tokens(variant: str, line: str) -> str:
    """What a variant tells the model beside the line: its level word, its program or subsystem."""
    from faultlens.parsing.severity import error_words, level_name, trainer_level
    from faultlens.parsing.subsystems import attribute
    from faultlens.parsing.timestamps import program_of, split_timestamp

    out = []
    msg = split_timestamp(line).message
    if "+sev" in variant:
        level = trainer_level(msg)
        out.append(f"lvl_{level_name(level) if level is not None else 'none'}")
        out.append("errwords_yes" if error_words(msg) else "errwords_no")
    if "+prog" in variant:
        prog = program_of(line)
        att = None if prog else attribute(msg)
        name = prog or (att.subsystem if att is not None else "none")
        out.append("prog_" + "".join(c if c.isalnum() else "_" for c in name.lower()))
    return " ".join(out)


def training_set(k: int, variant: str, batches: list[int], together: bool = False) -> list[tuple[str, str, str]]:
    """(source, line, class) without any sample of batch k's sources or lines; ``together``: nor of
    the batches frozen at k's commit (collected at the same time, as two halves of one search)."""
    from faultlens.parsing import line_corpus, line_model
    from tools.log_corpus_score import read_rows, source_of

    mine = [
        json.loads(t)
        for p in sorted((CORPUS / f"fresh{k}").glob("*.jsonl"))
        for t in p.read_text(encoding="utf-8").splitlines()
        if t.strip()
    ]
    banned = {source_of(r) for r in mine} | {o for r in mine if "/" in (o := line_corpus.origin_of(r.get("provenance", ""), ""))}
    lines = {" ".join(r.get("lines") or [r.get("line", "")]) for r in mine}

    def keep(prov: str, line: str) -> bool:
        o = line_corpus.origin_of(prov, "")
        return line not in lines and source_of({"provenance": prov}) not in banned and not ("/" in o and o in banned)

    rows = [r for rs in line_corpus.read_rows().values() for r in rs]
    if variant != "shipped":
        twins = {j for j in batches if together and frozen_commit(j) == frozen_commit(k)} | {k}
        rows += [
            r for j in batches if j not in twins for p in sorted((CORPUS / f"fresh{j}").glob("*.jsonl")) for r in read_rows(p)
        ]
    out = [(s, ln, lab) for r in rows if keep(r.get("provenance", ""), " ".join(r.get("lines") or [r.get("line", "")]))
           for s, ln, lab in line_model.corpus_samples([r])]  # fmt: skip
    out += [(s, ln, lab) for s, ln, lab, prov in line_model.table_samples() if keep(prov, ln)]
    return [(f"{s} {extra_tokens(variant, ln)}".strip(), ln, lab) for s, ln, lab in out]


def unclaimed(r: dict[str, Any]) -> list[list[Any]]:
    """The questions of mode ``+all``: a row no rule took and the parsers did not find alarming is
    asked about too, line by line (what the model would do as a detector, not only a classifier)."""
    if r["asked"] or r["events"]:
        return r["asked"]
    from faultlens.parsing.timestamps import split_timestamp

    src = r["row"].get("source", "kernel")
    return [[split_timestamp(ln).message, src, ln, None] for ln in r["row"].get("lines") or [r["row"]["line"]]]


def answers(model: Any, variant: str, asked: list[list[Any]], threshold: float) -> list[str | None]:
    from faultlens.parsing.line_model import HEALTHY, normalise

    if not asked:
        return []
    texts = [f"{src} {extra_tokens(variant, raw)} {normalise(msg)}".replace("  ", " ") for msg, src, raw, _ in asked]
    probs = model.pipeline.predict_proba(texts)
    classes = list(model.pipeline.classes_)
    out: list[str | None] = []
    for p in probs:
        best = int(p.argmax())
        out.append(None if classes[best] == HEALTHY or p[best] < threshold else str(classes[best]))
    return out


# -- why a frozen miss was missed ---------------------------------------------------------------------------
def why_missed(r: dict[str, Any]) -> str:
    """A frozen miss by what the frozen parsers did with it: named another class (a convention or a
    family read as its neighbour), only recorded it (its level or words read as no alert), asked the
    model and got no class (an alarming line of a family no rule has), or never found it alarming
    (a program or format no rule reads, or error words the severity reader lacks)."""
    events = r["events"]
    acting = [e for e in events if e[2] not in ("none", None)]
    if any(e[1] not in (None, "unknown") for e in acting):
        return "another class"
    if events and not acting:
        return "recorded, not alerted"
    if r["asked"]:
        return "alarming, no rule, model unsure"
    return "not read as alarming"


def parse_batches(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", nargs=2, metavar=("TREE", "DIR"), help=argparse.SUPPRESS)
    ap.add_argument("--batches", default="1-12")
    ap.add_argument("--future", default="", help="batches scored with models trained on all of --batches (none left out)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--together", action="store_true", help="leave out with batch k the batches frozen at its commit (collected with it)"
    )
    ap.add_argument("--misses", action="store_true", help="sort each batch's frozen misses by why they were missed")
    ap.add_argument("--overlay", default="", help="a mechanism of today's code (rule id prefixes, or record:class) added to each "
                    "batch's frozen code: what it would have caught unseen, and fired")  # fmt: skip
    ap.add_argument("--cross", action="store_true", help="each batch's frozen code plus the catalogue rules later written from OTHER "
                    "batches (rules_by_batch): what rules mined elsewhere catch of a batch they never saw")  # fmt: skip
    ap.add_argument("--by-class", action="store_true", help="per class: right on first sight (frozen), with --overlay, and once mined (today)")
    args = ap.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    sys.path.insert(0, str(ROOT))
    from faultlens.parsing import line_model

    batches = parse_batches(args.batches)
    variants = [v for v in args.variants.split(",") if v]
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # right, faults, fired, healthy
    whys: Counter[str] = Counter()
    future = parse_batches(args.future) if args.future else []
    tokens = [t for t in args.overlay.split(",") if t]
    per_class: dict[str, Counter[str]] = defaultdict(Counter)
    for k in batches + future:
        frows = frozen_rows(k)
        base = [judge(r["row"], r["events"]) for r in frows]
        line = {"batch": k, "frozen": frozen_commit(k), "rows": len(frows)}
        # The frozen rules alone: what the model, whichever, adds or fires on top of them.
        cells = {"frozen": base, "rules_only": [rescored(r, []) for r in frows]}
        if tokens or args.by_class or args.cross:
            trows = today_rows(k)
            if tokens:
                cells["overlay"] = [judge(f["row"], overlaid(f, t, tokens)) for f, t in zip(frows, trows, strict=True)]
            if args.cross:
                others = {rid for rid, bs in rules_by_batch().items() if k not in bs}
                own = {rid for rid, bs in rules_by_batch().items() if k in bs}
                cells["cross"] = [judge(f["row"], cross_overlaid(f, t, others)) for f, t in zip(frows, trows, strict=True)]
                cells["own_rules"] = [judge(f["row"], cross_overlaid(f, t, own)) for f, t in zip(frows, trows, strict=True)]
            if args.by_class:
                today = [judge(t["row"], t["events"]) for t in trows]
                over = cells.get("overlay", base)
                for i, f in enumerate(frows):
                    if f["row"].get("healthy"):
                        continue
                    c = per_class[f["row"].get("fault") or "any"]
                    c["rows"] += 1
                    c["unseen"] += base[i][0]
                    c["overlay"] += over[i][0]
                    c["mined"] += today[i][0]
                    if not base[i][0]:
                        c["why: " + why_missed(f)] += 1
        for v in variants:
            model = line_model.train(training_set(k, v, batches, args.together))
            for t in THRESHOLDS:
                cells[f"{v}@{t}"] = [rescored(r, answers(model, v, r["asked"], t)) for r in frows]
                cells[f"{v}+all@{t}"] = [rescored(r, answers(model, v, unclaimed(r), t)) for r in frows]
        for name, res in cells.items():
            oks = [ok for r, (ok, _) in zip(frows, res, strict=True) if not r["row"].get("healthy")]
            fires = [f for r, (_, f) in zip(frows, res, strict=True) if r["row"].get("healthy")]
            line[name] = f"{sum(oks)}/{len(oks)} right, {sum(fires)}/{len(fires)} fired"
            tot = totals[name if k in batches else f"future {name}"]
            tot[0] += sum(oks)
            tot[1] += len(oks)
            tot[2] += sum(fires)
            tot[3] += len(fires)
        if args.misses:
            why = Counter(why_missed(r) for r, (ok, _) in zip(frows, base, strict=True) if not r["row"].get("healthy") and not ok)
            line["why_missed"] = dict(why)
            whys.update(why)
        print(json.dumps(line), flush=True)
    for name, (right, faults, fired, healthy) in totals.items():
        print(json.dumps({"total": name, "right": f"{right}/{faults}", "recall": round(right / faults, 3) if faults else None,
                          "fired": f"{fired}/{healthy}", "fired_pct": round(100 * fired / healthy, 2) if healthy else None}))  # fmt: skip
    if args.misses:
        print(json.dumps({"why_missed": dict(whys)}))
    for cls, c in sorted(per_class.items(), key=lambda kv: -kv[1]["rows"]):
        n = c["rows"]
        print(json.dumps({"class": cls, "rows": n, "unseen": round(c["unseen"] / n, 3), "with_overlay": round(c["overlay"] / n, 3),
                          "mined": round(c["mined"] / n, 3), **{k: v for k, v in c.items() if k.startswith("why")}}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
