"""Bytes as a broken producer or a flaky link leaves them, for the readers' fuzz tests."""

from __future__ import annotations

import random


def damaged(raw: bytes, rnd: random.Random) -> bytes:
    """``raw`` as is (85%), cut short (10%), or with one byte replaced by a random one (5%)."""
    cut = rnd.random()
    if cut < 0.1:
        return raw[:rnd.randint(0, len(raw))]
    if cut < 0.15:
        i = rnd.randrange(len(raw))
        return raw[:i] + bytes([rnd.randrange(256)]) + raw[i + 1:]
    return raw
