"""A number from the environment (``FAULTLENS_*``), read one way everywhere: a value that is no
number is said, never silently dropped; what happens next is the caller's policy.

Two policies, because two kinds of process read such numbers. An operator's command reads them for
its flag defaults at start: a typo there must stop it with a line naming the variable and its
value, before it acts on a default nobody asked for (``"raise"``). A trainer hook reads them inside
someone's training run, which it must never stop: it warns and goes on with the default
(``"warn"``). Here in the bus's bottom layer, beside ``events/home.py``, because both the CLI and the
trainer hooks (which may import only the bus) read them.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from typing import Literal

log = logging.getLogger(__name__)

OnBad = Literal["raise", "warn"]


class BadEnvNumber(SystemExit):
    """A ``FAULTLENS_*`` variable that is not the number it must be (the ``"raise"`` policy).

    A SystemExit, so that a command reading its flag defaults as it builds its parser stops with
    this one line and exit status 1, not a traceback; ``except BadEnvNumber`` still catches it.
    """

    def __init__(self, line: str) -> None:
        super().__init__(f"faultlens: {line}")
        self.line = line


def env_number(
    name: str,
    default: float,
    *,
    on_bad: OnBad,
    at_least: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> float:
    """``name`` from ``environ`` (default: the process's) as a float; ``default`` when unset or empty.

    With ``at_least``, only a finite number of at least that counts as one (a bound in seconds is
    never negative, NaN or infinite); without it, whatever ``float()`` reads, as a flag of
    ``type=float`` takes it. Anything else raises :class:`BadEnvNumber` (``on_bad="raise"``) or is
    logged as a warning and gives ``default`` (``on_bad="warn"``).
    """
    raw = (os.environ if environ is None else environ).get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        fits = False
    else:
        fits = at_least is None or (math.isfinite(value) and value >= at_least)
    if fits:
        return value
    wanted = "a number" if at_least is None else f"a number of at least {at_least:g}"
    if on_bad == "raise":
        raise BadEnvNumber(f"{name}={raw!r} is not {wanted}")
    log.warning("%s=%r is not %s; using %g", name, raw, wanted, default)
    return default
