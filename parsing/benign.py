"""Known-benign lines (parsing/benign.toml): alarming to read, marked as noise by the peers or the
vendor. The parsers ask here before any rule, so such a line gives no action whichever rule or
subsystem would otherwise take it. Every entry carries needles, so a line holding none of them
(nearly all) costs a few substring tests.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).resolve().parent / "benign.toml"


class BenignTableError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class BenignPattern:
    id: str
    source: str
    needles: tuple[str, ...]
    pattern: re.Pattern[str]
    why: str
    provenance: str
    example: str


@dataclass(frozen=True)
class BenignSet:
    patterns: tuple[BenignPattern, ...]
    needles: tuple[str, ...]

    def match(self, message: str) -> BenignPattern | None:
        """The benign pattern ``message`` is an instance of, or None."""
        for needle in self.needles:
            if needle in message:
                break
        else:
            return None
        for p in self.patterns:
            if any(n in message for n in p.needles) and p.pattern.search(message):
                return p
        return None


def parse_table(text: str, origin: str) -> tuple[BenignPattern, ...]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BenignTableError(f"{origin}: not TOML: {exc}") from None
    out = []
    for i, raw in enumerate(doc.get("benign", ())):
        where = f"{origin}: entry {raw.get('id') or i + 1}"
        needles = raw.get("needles")
        if not raw.get("id") or not needles or not raw.get("provenance"):
            raise BenignTableError(f"{where}: needs an id, needles and a provenance")
        try:
            pattern = re.compile(raw["pattern"])
        except (KeyError, re.error) as exc:
            raise BenignTableError(f"{where}: bad or missing pattern: {exc}") from None
        out.append(BenignPattern(raw["id"], raw.get("source", "kernel"), tuple(needles), pattern, raw.get("why", ""),
                                 raw["provenance"], raw.get("example", "")))
    return tuple(out)


@lru_cache(maxsize=4)
def for_source(source: str) -> BenignSet:
    patterns = tuple(p for p in parse_table(TABLE.read_text(encoding="utf-8"), TABLE.name) if p.source in (source, "any"))
    return BenignSet(patterns, tuple(sorted({n for p in patterns for n in p.needles})))
