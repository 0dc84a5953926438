"""Which of many literals a line holds, in one regex scan: the parsers' pre-filters
(parsing.line.any_of) and the rule catalogue's candidate rules (parsing.rules.RuleSet).

A trie regex of the literals dispatches on each position's character, but Python's regex engine
enters the trie at every position whose character starts a literal, and with a few hundred
literals nearly every letter, the space and the digit 0 start one: ~100 ns a position, 8 us for
a 90-character line. So each literal is entered at its rarest character in log text instead (its
anchor; "time" at its m, " D " at its D), the part before the anchor checked by a look-behind once
the rest matched. The anchors are chosen together (a greedy hitting set over the characters'
frequencies in real logs) so that few characters, and rare ones, start the trie: the kernel
pre-filter's 220 literals enter at 23 characters, 28% of the held lines' positions instead of 77%.
"""

from __future__ import annotations

import importlib
import re
from functools import lru_cache
from typing import Any, Callable, Iterable

# The regex engine's own reading of a pattern and its op codes (required): private to re, so not
# in its type stubs.
_parser: Any = importlib.import_module("re._parser")

# How often each character occurs in log text, per mille: every line of tests/fixtures/log_corpus
# (dev, mined, held-out, fresh1-6; 294k characters), 2026-11-29. Others: RARE. Only the scan's
# speed depends on these, never what it finds.
FREQ = {" ": 122.5, "e": 60.2, "0": 52.7, "r": 41.2, "o": 38.6, "t": 36.6, "n": 33.8, "a": 32.6, ":": 31.5, "i": 31.3,
        "s": 29.0, "1": 26.1, "c": 25.5, "d": 24.4, "l": 23.4, "2": 21.0, "m": 16.4, ".": 15.5, "u": 15.5, "3": 14.1,
        "p": 14.0, "5": 13.3, "4": 13.2, "f": 11.5, "6": 11.2, "8": 10.9, "g": 10.3, "7": 10.3, "9": 9.8, "h": 9.6,
        "_": 9.0, "-": 8.8, "k": 8.5, "b": 8.4, "C": 8.1, "]": 7.8, "[": 7.6, ",": 7.0, "N": 6.8, "v": 6.6, "y": 6.5,
        "/": 6.3, "E": 5.8, "I": 5.7, "R": 5.4, "x": 5.3, "P": 4.9, "(": 4.5, ")": 4.5, "T": 4.5, "O": 4.2, "A": 4.2,
        "S": 4.0, "w": 4.0, "D": 3.6, "L": 3.6, "U": 3.5, "=": 3.4, "M": 3.3, "F": 3.2, "G": 3.1, "B": 3.0, "'": 1.7,
        "V": 1.4, "W": 1.4, "X": 1.1, "H": 1.0, "q": 1.0, ">": 0.8}  # fmt: skip
RARE = 0.5


def _anchors(words: list[str]) -> dict[str, int]:
    """Each word's anchor offset: few characters, rare ones, shared by all the words."""
    lowered = not any(c.isupper() for w in words for c in w)  # literals for a lowered line: A counts as a

    def freq(c: str) -> float:
        return FREQ.get(c, RARE) + (FREQ.get(c.upper(), 0.0) if lowered and c.islower() else 0.0)

    left, chosen = set(words), set()
    while left:
        holding: dict[str, int] = {}
        for w in left:
            for c in set(w):
                holding[c] = holding.get(c, 0) + 1
        best = max(holding, key=lambda c: (holding[c] / freq(c), c))
        chosen.add(best)
        left = {w for w in left if best not in w}
    return {w: min((i for i, c in enumerate(w) if c in chosen), key=lambda i: (freq(w[i]), i)) for w in words}


class NeedleScan:
    """A regex that finds a position holding some literal (``search``: the pre-filter's question)
    and every literal a text holds (``found``)."""

    def __init__(self, literals: Iterable[str]):
        words = sorted(set(literals))
        if not all(words):
            raise ValueError("an empty literal matches everything")
        self._offset = _anchors(words)
        root: dict[str, Any] = {}
        for w in words:
            node = root
            for ch in w[self._offset[w]:]:
                node = node.setdefault(ch, {})
            node.setdefault("", set()).add(w)
        self.pattern = re.compile(self._emit(root, top=True) if root else r"(?!)")
        self._words = words
        self._extending: dict[str, tuple[tuple[str, int], ...]] | None = None

    def _emit(self, node: dict[str, Any], top: bool = False) -> str:
        ends = node.get("", ())
        if any(self._offset[w] == 0 for w in ends):
            return ""  # a literal ends here whatever came before: a pre-filter needs no more
        # A literal entered past its start ends here only when its head precedes the anchor.
        alts = [f"(?<={re.escape(w)})" for w in sorted(ends)]
        alts += [re.escape(ch) + self._emit(sub) for ch, sub in sorted(node.items()) if ch]
        # Not grouped at the top: a caller's "|x" appended stays one alternation, whose first
        # characters the engine still skips to (a group would make it try every position).
        return alts[0] if len(alts) == 1 else "|".join(alts) if top else "(?:" + "|".join(alts) + ")"

    def found(self, text: str) -> set[str]:
        """Every literal ``text`` holds."""
        extending = self._extending
        if extending is None:
            # The scan stops at the shortest key (a literal from its anchor on) whose head is
            # there: the literals whose keys extend it are those that may also be anchored there.
            keys = {w: w[self._offset[w]:] for w in self._words}
            extending = self._extending = {
                k: tuple((w, self._offset[w]) for w, kw in keys.items() if kw.startswith(k)) for k in set(keys.values())}
        out: set[str] = set()
        search = self.pattern.search
        m = search(text)
        while m is not None:
            at = m.start()
            for word, offset in extending[m.group()]:
                if at >= offset and text.startswith(word, at - offset):
                    out.add(word)
            m = search(text, at + 1)
        return out


@lru_cache(maxsize=256)
def scan(literals: frozenset[str]) -> NeedleScan:
    """The scan of ``literals``, built once (a parser is made per node's stream)."""
    return NeedleScan(literals)


# -- what every match of a pattern holds -------------------------------------------------------
# Under IGNORECASE these ASCII letters also match characters that str.lower() does not map onto
# them (the regex engine's extra case pairs: İ ı for i, ſ for s): a literal holding one stands
# for each of its forms in a lowered line (İ lowers to i + U+0307).
_FOLDS = {"i": ("i", "i\u0307", "\u0131"), "s": ("s", "\u017f")}
_MAX_FORMS = 8

Cost = Callable[[frozenset[str]], float]


def required(pattern: re.Pattern[str], cost: Cost) -> list[frozenset[str]]:
    """Sets of literals, lowered, one of which is in the lowered text of every match of
    ``pattern`` (each set a choice; [] when none is known): the pattern's runs of plain characters
    and, for an alternation, one set from each branch (the cheapest by ``cost``)."""
    return _required(_parser.parse(pattern.pattern, pattern.flags), bool(pattern.flags & re.IGNORECASE), cost)


def _required(items: Any, nocase: bool, cost: Cost) -> list[frozenset[str]]:
    out: list[frozenset[str]] = []
    run: list[str] = [""]  # the forms of the literal run being read

    def close() -> None:
        if run != [""]:
            out.append(frozenset(run))
        run[:] = [""]

    for op, av in items:
        if op is _parser.LITERAL and av < 128:
            ch = chr(av).lower()
            forms = _FOLDS.get(ch, (ch,)) if nocase else (ch,)
            if len(run) * len(forms) > _MAX_FORMS:
                close()
                forms = forms if len(forms) <= _MAX_FORMS else ()
            run[:] = [r + f for r in run for f in forms] or [""]
        elif op is _parser.AT:
            continue  # zero-width: the characters on either side are still adjacent
        else:
            close()
            if op is _parser.SUBPATTERN:
                _, add, remove, sub = av
                out += _required(sub, (nocase or bool(add & re.IGNORECASE)) and not remove & re.IGNORECASE, cost)
            elif op is _parser.ATOMIC_GROUP:
                out += _required(av, nocase, cost)
            elif op in (_parser.MAX_REPEAT, _parser.MIN_REPEAT, _parser.POSSESSIVE_REPEAT) and av[0] >= 1:
                out += _required(av[2], nocase, cost)
            elif op is _parser.BRANCH:
                each = [min(_required(alt, nocase, cost), key=cost, default=None) for alt in av[1]]
                if all(each):
                    out.append(frozenset().union(*each))  # type: ignore[arg-type]
    close()
    return out
