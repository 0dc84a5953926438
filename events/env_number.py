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
from typing import Literal, TypeVar

log = logging.getLogger(__name__)

OnBad = Literal["raise", "warn"]
# A default may be None (a flag whose absence means something): returned as given when unset.
D = TypeVar("D", bound=float | None)


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
    default: D,
    *,
    on_bad: OnBad,
    at_least: float | None = None,
    above: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> float | D:
    """``name`` from ``environ`` (default: the process's) as a float; ``default`` when unset or empty.

    With ``at_least`` (or ``above``, a bound the value must pass), only a finite number of at least
    (over) that counts as one (a bound in seconds is never negative, NaN or infinite); without either,
    whatever ``float()`` reads, as a flag of ``type=float`` takes it. Anything else raises
    :class:`BadEnvNumber` (``on_bad="raise"``) or is logged as a warning and gives ``default``
    (``on_bad="warn"``).
    """
    value = _read(name, on_bad, at_least, above, False, environ, default)
    return default if value is None else value


def env_whole(
    name: str,
    default: D,
    *,
    on_bad: OnBad,
    at_least: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> int | D:
    """``name`` as a whole number (a count, a port, a seed), as :func:`env_number` reads it: ``8.5`` nodes is
    said, not cut to 8 (``int()`` would), and ``1e3`` is 1000 (what ``float()`` reads, whole)."""
    value = _read(name, on_bad, at_least, None, True, environ, default)
    return default if value is None else int(value)


def _read(name: str, on_bad: OnBad, at_least: float | None, above: float | None, whole: bool,
          environ: Mapping[str, str] | None, default: float | None = None) -> float | None:
    """The variable's number, None where it is unset, empty or (said, under ``"warn"``) no such number."""
    raw = (os.environ if environ is None else environ).get(name, "")
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        fits = False
    else:
        bounded = at_least is not None or above is not None or whole
        fits = not bounded or (math.isfinite(value) and (at_least is None or value >= at_least)
                               and (above is None or value > above) and (not whole or value.is_integer()))
    if fits:
        return value
    wanted = "a whole number" if whole else "a number"
    if at_least is not None:
        wanted += f" of at least {at_least:g}"
    elif above is not None:
        wanted += f" over {above:g}"
    if on_bad == "raise":
        raise BadEnvNumber(f"{name}={raw!r} is not {wanted}")
    log.warning("%s=%r is not %s; using %s", name, raw, wanted, "none" if default is None else f"{default:g}")
    return None
