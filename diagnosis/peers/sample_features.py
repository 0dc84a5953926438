"""What one NVML sample says about its node, for the feature windows (diagnosis/peers/features.py).

A sample's features are its GPUs' mean and least utilisation, the slowest SM clock and power
ratio (of the maximum clock, of the power limit), the hottest GPU and the share of GPUs that
throttle thermally; ``None`` where no GPU reports a finite value. A plain sample (see
events.gpu_table) is read straight from its columns; any other goes through arrays that read
whatever is there as a number or as missing. Both give the same values to the last bit: sums
run GPU by GPU in the sample's order, and every division is of floats, as numpy's would be.
"""

from __future__ import annotations

from functools import reduce
from operator import add, truediv
from typing import Mapping

import numpy as np

from faultlens.diagnosis.rules.base import num
from faultlens.events.gpu_table import TABLE_NUMBERS, GpuTable

THERMAL = frozenset({"hw_thermal", "sw_thermal", "hw_power_brake", "hw_slowdown"})
# The sample features in the order a sample reports them (the window's features keep that order).
SAMPLE_FEATURES = ("util", "util_min", "sm_clock_ratio", "power_ratio", "temp_c", "throttle")

Features = tuple[float | None, float | None, float | None, float | None, float | None, float | None]

_W = len(TABLE_NUMBERS)
_UTIL, _TEMP, _CLOCK, _CLOCK_MAX, _POWER, _POWER_LIMIT, _PCIE_REPLAY = map(TABLE_NUMBERS.index, (
    "util", "temp_c", "sm_clock_mhz", "sm_clock_max_mhz", "power_w", "power_limit_w", "pcie_replay"))

# What one GPU contributes to a loose sample's arrays, one column each.
_COLUMNS = ("util", "sm_clock_mhz", "sm_clock_max_mhz", "power_w", "power_limit_w", "temp_c", "pcie_replay")
_NCOL = len(_COLUMNS)


def plain_features(table: GpuTable) -> tuple[Features, list]:
    """A plain sample's features and its GPUs' PCIe replay counters."""
    numbers = table.numbers
    util = numbers[_UTIL::_W]
    temp = numbers[_TEMP::_W]
    clock, clock_max = numbers[_CLOCK::_W], numbers[_CLOCK_MAX::_W]
    power, power_limit = numbers[_POWER::_W], numbers[_POWER_LIMIT::_W]
    if table.has_null:
        util = [u for u in util if u is not None]
        temp = [t for t in temp if t is not None]
        clock, clock_max = _both(clock, clock_max)
        power, power_limit = _both(power, power_limit)
    util_mean: float | None
    util_min: float | None
    if util:
        util_mean = reduce(add, util, 0.0) / len(util)
        util_min = min(util)
    else:
        util_mean = util_min = None
    throttle = table.throttle
    throttled = sum(1 for t in throttle if t and not THERMAL.isdisjoint(t)) if any(throttle) else 0
    return (util_mean, util_min, _least_ratio(clock, clock_max), _least_ratio(power, power_limit),
            max(temp) if temp else None, throttled / len(table.gpus)), numbers[_PCIE_REPLAY::_W]


def _both(part: list, whole: list) -> tuple[list, list]:
    """The GPUs that report both values."""
    pairs = [(p, w) for p, w in zip(part, whole, strict=True) if p is not None and w is not None]
    return [p for p, _ in pairs], [w for _, w in pairs]


def _least_ratio(part: list, whole: list) -> float | None:
    """The least part/whole over GPUs with a whole that is not zero (the numerator as a float:
    an int / int division would round differently past 2**53). An overflowing ratio is infinite
    here as in numpy; the window drops what is not finite."""
    if 0 in whole:
        part = [p for p, w in zip(part, whole, strict=True) if w != 0]
        whole = [w for w in whole if w != 0]
    if not part:
        return None
    return min(map(truediv, map(float, part), whole))


def loose_features(gpus: list) -> tuple[Features, list]:
    """Features of a sample that is not plain: GPU objects may lack keys or hold odd values."""
    row: list = []
    throttled = 0
    for g in gpus:
        if type(g) is not dict and not isinstance(g, Mapping):
            continue
        row.extend(map(g.get, _COLUMNS))
        throttle = g.get("throttle")
        if throttle and not THERMAL.isdisjoint(throttle):
            throttled += 1
    try:
        a = np.array(row, dtype=float)
    except (TypeError, ValueError):  # a value that is not a plain number (unchecked input)
        a = np.array([num(v) for v in row], dtype=float)
    a = a.reshape(len(row) // _NCOL, _NCOL)
    util, clock, cmax, power, limit, temp = (a[:, i] for i in range(_NCOL - 1))
    have_util = ~np.isnan(util)
    n_util = int(have_util.sum())
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ratio = np.divide(clock, cmax, out=np.full_like(clock, np.nan), where=cmax != 0)
        power_ratio = np.divide(power, limit, out=np.full_like(power, np.nan), where=limit != 0)
        values = [
            float(np.add.accumulate(np.where(have_util, util, 0.0))[-1]) / n_util if n_util else np.nan,
            np.fmin.reduce(util, initial=np.nan),
            np.fmin.reduce(ratio, initial=np.nan),
            np.fmin.reduce(power_ratio, initial=np.nan),
            np.fmax.reduce(temp, initial=np.nan),
            throttled / len(gpus),
        ]
    feats = tuple(float(v) if np.isfinite(v) else None for v in values)
    return feats, row[_NCOL - 1::_NCOL]  # type: ignore[return-value]


def pcie_replay_total(counters: list) -> float:
    """A sample's PCIe replay counters added over its GPUs (a GPU without one counts 0)."""
    total = 0.0
    for value in counters:
        total += num(value) or 0.0
    return total
