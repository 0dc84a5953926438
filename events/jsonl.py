"""Reading a JSON-lines file someone wrote by hand (labels, expect files): blank lines skipped, a bad
line named by its place, so the person can find and fix it."""

from __future__ import annotations

import os
from typing import Any, Iterator

import orjson


def json_lines(path: str | os.PathLike[str], error: type[Exception] = ValueError) -> Iterator[tuple[str, Any]]:
    """``(where, object)`` per non-blank line, ``where`` as ``PATH:LINE``; raises ``error`` on bad JSON."""
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{lineno}", orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise error(f"{path}:{lineno}: not valid JSON ({exc})") from None
