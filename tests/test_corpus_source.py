"""tools.corpus_source tells a source the corpus already cites from a new one, and splits new ones
into two halves by a hash of their key, so two collectors of one fresh batch never share a source."""

from __future__ import annotations

import json

from tools.corpus_source import cited_sources, half_of, main
from tools.log_corpus_score import CORPUS, source_of


def test_a_cited_source_is_known_and_an_uncited_one_new(capsys):
    row = json.loads(next(p for p in sorted(CORPUS.glob("*.jsonl"))).read_text().splitlines()[0])
    cited = row["provenance"]
    unheard = "https://github.com/example-owner/never-cited/issues/987654321"
    assert source_of(row) in cited_sources() and source_of({"provenance": unheard}) not in cited_sources()
    assert main([cited, unheard]) == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first.split()[1:] == ["known", source_of(row)]
    assert second.split()[1:] == ["new", "example-owner/never-cited#987654321"]


def test_the_halves_split_by_the_key_alone():
    keys = [f"owner/repo#{n}" for n in range(400)]
    halves = [half_of(k) for k in keys]
    assert halves == [half_of(k) for k in keys] and set(halves) == {1, 2}
    assert 120 < halves.count(1) < 280  # an MD5 digit splits about evenly
    # An issue's address and its provenance with a remark are one source, in one half.
    assert half_of(source_of({"provenance": "https://github.com/a/b/issues/7"})) == half_of(
        source_of({"provenance": "https://github.com/a/b/issues/7 (comment 3)"}))
