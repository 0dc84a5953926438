"""One log line through a fresh parser: the events it gives, their classes, those that act.

The recognition rounds' tests (test_issue54_round*.py) ask each line the same questions."""

from __future__ import annotations

from faultlens.parsing.registry import parser_for


def events(line: str, source: str = "kernel") -> list:
    p = parser_for(source)
    return p.feed(line) + p.flush()


def classes(line: str, source: str = "kernel") -> set[str | None]:
    return {e.data.get("fault") for e in events(line, source)}


def acting(line: str, source: str = "kernel") -> list:
    return [e for e in events(line, source) if e.data.get("action") not in (None, "none")]


def verdicts(line: str, source: str = "kernel") -> list[tuple[object, object]]:
    """(fault, action) of every event of ``line``, recorded or acting."""
    return [(e.data["fault"], e.data["action"]) for e in events(line, source)]


def acting_verdicts(line: str, source: str = "kernel") -> list[tuple[object, object]]:
    """(fault, action) of each event of ``line`` that acts."""
    return [(e.data["fault"], e.data["action"]) for e in acting(line, source)]
