"""The real-line corpus's format, over every file: the mined set, the development set, the
held-out set (tests/fixtures/log_corpus/heldout) and the fresh batches (tests/fixtures/log_corpus/fresh*,
lines gathered after the rules to measure how recognition generalises). It checks the rows, never the
parsers' score: the held-out and fresh lines are there to be missed until recognition generalises, so
no test here may demand a score of them (tools/log_corpus_score.py --heldout or a fresh folder prints
it, bench/bench_log_recognition.py --fresh too), and test_log_corpus.py never reads a fresh folder.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES
from tools.log_corpus_score import (
    CORPUS,
    HELDOUT,
    MINED,
    corpus_files,
    main,
    read_rows,
    source_of,
)

FRESH = sorted(d for d in CORPUS.glob("fresh*") if d.is_dir())
FILES = corpus_files(CORPUS) + corpus_files(HELDOUT) + [p for d in FRESH for p in corpus_files(d)]
ROWS = [(p, n, r) for p in FILES for n, r in enumerate(read_rows(p), 1)]


def text_of(row: dict) -> str:
    return row["line"] if "line" in row else "\n".join(row["lines"])


def set_of(path: Path) -> str:
    """Which set a file belongs to: 'dev' (the mined and development files), 'heldout' or a fresh folder's name."""
    return "dev" if path.parent == CORPUS else path.parent.name


def test_the_corpus_has_its_three_sets():
    names = {p.name for p in corpus_files(CORPUS)}
    assert set(MINED) <= names
    assert names - set(MINED), "no development file next to the mined ones"
    assert corpus_files(HELDOUT), "no held-out file"
    assert (HELDOUT / "README.md").is_file()
    assert FRESH, "no fresh batch"
    for d in FRESH:
        assert corpus_files(d) and (d / "README.md").is_file(), d


def test_the_development_score_never_reads_a_subfolder():
    """test_log_corpus.py scores the mined files and `rows(CORPUS)` the top level only: a held-out or
    fresh row there would be a row the rules may be written from."""
    assert all(p.parent == CORPUS for p in corpus_files(CORPUS))
    fresh_or_held = {p.resolve() for p in FILES if p.parent != CORPUS}
    assert not fresh_or_held & {(CORPUS / n).resolve() for n in MINED}


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_every_row_is_well_formed_and_cites_its_source(path: Path):
    new = path.name not in MINED or path.parent != CORPUS
    for n, r in enumerate(read_rows(path), 1):
        where = f"{path.relative_to(CORPUS)}:{n}"
        assert isinstance(r.get("provenance"), str) and r["provenance"].strip(), where
        assert ("line" in r) != ("lines" in r), where
        assert text_of(r).strip(), where
        assert r.get("source") in ("kernel", "nccl"), where
        assert r.get("action") is None or r["action"] in ACTIONS, where
        if r.get("healthy"):
            assert r["healthy"] is True and "fault" not in r and "xid" not in r, where
            continue
        assert "fault" in r, where
        if new:  # the collections gathered for issue 45 name a class for every fault line
            assert r["fault"] in FAULT_CLASSES and r["fault"] != "unknown", where
        else:  # the mined files keep null for "any event" (an Xid number or the line itself judges)
            assert r["fault"] is None or r["fault"] in FAULT_CLASSES, where


def test_no_line_appears_twice_anywhere():
    seen: dict[str, str] = {}
    for p, n, r in ROWS:
        where = f"{p.relative_to(CORPUS)}:{n}"
        assert text_of(r) not in seen, (where, "repeats", seen.get(text_of(r)))
        seen[text_of(r)] = where


# Indexed files cited under two spellings of their index ('index id N', 'search-index id N') before
# source_of keyed them by id (round 22): each was cited by the development set and one fresh batch. The
# batches' figures stay as they were scored; no new source may join them.
SHARED_BEFORE_ROUND_22 = {
    f"public GitHub file, index id {n}": {"dev", batch}
    for n, batch in [(42561576571, "fresh24"), (35666355451, "fresh24"), (58479869362, "fresh24"),
                     (56886461816, "fresh25"), (53411971708, "fresh29"), (48596448923, "fresh35")]
}


def test_no_source_is_shared_between_sets():
    """A report's lines stay in one set: development (with the mined files), held-out, or one fresh
    batch; a fresh batch shares no source with the others, nor with the other batch."""
    by_source: dict[str, set[str]] = defaultdict(set)
    for p, _, r in ROWS:
        by_source[source_of(r)].add(set_of(p))
    split = {s: sets for s, sets in by_source.items() if len(sets) > 1 and SHARED_BEFORE_ROUND_22.get(s) != sets}
    assert not split, split


def test_fresh_rows_cite_a_report_and_use_few_rows_of_one():
    for d in FRESH:
        per_source: dict[str, int] = defaultdict(int)
        for p, n, r in ROWS:
            if p.parent == d:
                assert source_of(r) != "", f"{p.relative_to(CORPUS)}:{n}"
                per_source[source_of(r)] += 1
        heavy = {s: k for s, k in per_source.items() if k > 8}
        assert not heavy, (d.name, heavy)


def test_held_out_sources_are_whole_and_never_in_the_development_set():
    by_source: dict[str, set[str]] = defaultdict(set)
    for p, _, r in ROWS:
        if p.parent in (CORPUS, HELDOUT):
            by_source[source_of(r)].add(set_of(p))
    split = {s: sets for s, sets in by_source.items() if len(sets) > 1}
    assert not split, split
    held = {s for s, sets in by_source.items() if sets == {"heldout"}}
    new_dev = {source_of(r) for p, _, r in ROWS if p.parent == CORPUS and p.name not in MINED}
    assert len(held) * 2 >= len(new_dev), (len(held), len(new_dev))  # at least a third of the new sources


def test_rows_are_read_with_a_clear_error(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"line": "x", "source": "kernel", "healthy": True, "provenance": "p"}) + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_rows(bad)


def test_sources_are_the_report_or_the_repository():
    assert source_of({"provenance": "https://github.com/NVIDIA/nccl/issues/1405"}) == "NVIDIA/nccl#1405"
    assert source_of({"provenance": "https://github.com/openwrt/openwrt/pull/16419"}) == "openwrt/openwrt#16419"
    assert source_of({"provenance": "leptonai/gpud@4a8de33a pkg/kmsg/testdata/kmsg.1.log"}) == "leptonai/gpud"


def test_an_indexed_file_is_one_source_whatever_its_index_is_called():
    spellings = ["public GitHub file, index id 48596448923", "public GitHub file, search-index id 48596448923",
                 "index id 48596448923 (fresh35 holds the line)", "search-index id 48596448923"]
    assert {source_of({"provenance": p}) for p in spellings} == {"public GitHub file, index id 48596448923"}
    assert source_of({"provenance": "public GitHub file, index id 4859644892"}) != spellings[0]


def test_the_scorer_reads_a_file_a_folder_and_never_a_subfolder(tmp_path: Path, capsys):
    rows = [{"line": "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", "source": "kernel", "fault": "gpu_lost",
             "xid": 79, "provenance": "https://github.com/o/r/issues/1"},
            {"line": "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready", "source": "kernel", "healthy": True,
             "provenance": "https://github.com/o/r/issues/2"}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "heldout").mkdir()
    (tmp_path / "heldout" / "b.jsonl").write_text(json.dumps({**rows[0], "line": "x"}) + "\n")
    for target in (tmp_path, tmp_path / "a.jsonl"):
        assert main([str(target), "--by-source"]) == 0
        out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        total = next(o for o in out if o.get("total"))
        assert (total["faults"], total["healthy"], total["sources"], total["files"]) == (1, 1, 2, 1)
        assert {o["source"] for o in out if "source" in o} == {"o/r#1", "o/r#2"}


def test_an_issue_or_a_paste_is_one_source_whatever_its_address_is_spelled():
    # round 23: a thread cited by its address with or without scheme or www., or as 'o/r#N', is one source,
    # and so is a paste read as its page or its raw text
    thread = ["https://github.com/NVIDIA/nccl/issues/300", "www.github.com/NVIDIA/nccl/issues/300",
              "github.com/NVIDIA/nccl/issues/300", "NVIDIA/nccl#300", "https://www.github.com/NVIDIA/nccl/issues/300 (comment 4)"]
    assert {source_of({"provenance": p}) for p in thread} == {"NVIDIA/nccl#300"}
    assert source_of({"provenance": "NVIDIA/nccl#3000"}) != "NVIDIA/nccl#300"
    paste = ["https://pastebin.com/1eiFrGz9", "pastebin.com/raw/1eiFrGz9", "https://pastebin.com/raw/1eiFrGz9 (a kernel log)"]
    assert {source_of({"provenance": p}) for p in paste} == {"https://pastebin.com/1eiFrGz9"}
    assert source_of({"provenance": "leptonai/gpud@4a8de33a pkg/kmsg/testdata/kmsg.1.log"}) == "leptonai/gpud"
