"""Is a public source already cited by the real-line corpus, and which half of a two-collector
fresh batch does it fall in? (issue 54: a fresh batch is collected from sources no row cites yet,
scored on frozen code before anyone reads it, and only then mined.)

    .venv/bin/python -m tools.corpus_source URL_OR_PROVENANCE [...]

Prints one line a source: ``<half 1|2> <known|new> <source key>``. The key is
tools.log_corpus_score.source_of (``owner/repo#N`` for an issue or pull request however its address is
spelled: with or without scheme or ``www.``, or ``owner/repo#N`` itself; ``https://pastebin.com/X`` for a paste
read through any view, ``/raw/X`` too; ``public GitHub file, index id N`` for an indexed file whatever its
provenance calls the index; the address up to any remark otherwise); ``known`` means some row of tests/fixtures/log_corpus (every folder, the fresh
and held-out ones included) cites it. The half is the first hex digit of the key's MD5 (0-7: 1,
8-f: 2): two people collecting at once take one half each and never share a source, which is how
fresh1 and fresh2 were split.
"""

from __future__ import annotations

import argparse
import hashlib
import json

from tools.log_corpus_score import CORPUS, source_of


def cited_sources() -> set[str]:
    known: set[str] = set()
    for path in CORPUS.rglob("*.jsonl"):
        for text in path.read_text(encoding="utf-8").splitlines():
            if text.strip():
                known.add(source_of(json.loads(text)))
    return known


def half_of(key: str) -> int:
    return 1 if hashlib.md5(key.encode()).hexdigest()[0] in "01234567" else 2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", help="a URL or a provenance as a corpus row writes it")
    args = ap.parse_args(argv)
    known = cited_sources()
    for source in args.sources:
        key = source_of({"provenance": source})
        print(half_of(key), "known" if key in known else "new", key)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
