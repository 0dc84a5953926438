"""Echoes in the kernel log: one fault printed over several lines (Xid 79 then "fallen off the bus",
an OOM report then its victim and summary, an AER notice then its detail) folds into the event of
its first line. Keys fired within FOLD_LINES lines and FOLD_S seconds of each other are one fault.

Apart from the parser so each family of lines (parsing.kernel_gpu, parsing.kernel_host,
parsing.kernel_nic, the rule catalogue) folds through the same memory without reaching into the
parser's fields.
"""

from __future__ import annotations

from typing import Any

# Echoes of one fault arrive within a few lines and seconds; further apart they are a new occurrence.
FOLD_LINES = 64
FOLD_S = 10.0

Key = tuple[Any, ...]  # ("oom", pid), ("sxid", device, code), ...: a family name first
Clock = tuple[str, float] | None  # ("mono", seconds since boot) or ("wall", epoch); None: no clock


class Echoes:
    """What fired recently, by key; the parser moves ``n`` (its line number) and ``clock`` per line."""

    def __init__(self) -> None:
        self.n = 0
        self.clock: Clock = None
        self._recent: dict[Key, tuple[int, Clock]] = {}

    def seen(self, key: Key) -> bool:
        """True when ``key`` fired within FOLD_LINES and FOLD_S; marks it as fired now either way."""
        recent = self.recently(key)
        self._recent[key] = (self.n, self.clock)
        if len(self._recent) > 4096:
            self._recent = {k: v for k, v in self._recent.items() if self.n - v[0] <= FOLD_LINES}
        return recent

    def recently(self, key: Key) -> bool:
        """True when ``key`` fired within FOLD_LINES and FOLD_S (marks nothing)."""
        last = self._recent.get(key)
        if last is None or self.n - last[0] > FOLD_LINES:
            return False
        then, now = last[1], self.clock
        # Lines hours apart (the same fault after a restart) are two faults, however few lines lie between.
        return then is None or now is None or then[0] != now[0] or abs(now[1] - then[1]) <= FOLD_S

    def fired(self, key: Key) -> bool:
        """True when ``key`` fired at all since the memory was last pruned (no window)."""
        return key in self._recent

    def forget(self, key: Key) -> None:
        self._recent.pop(key, None)

    def clear(self) -> None:
        self._recent.clear()
