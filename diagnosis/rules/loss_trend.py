"""The trend tests the loss detectors judge a curve by: robust to the spikes a loss curve has."""

from __future__ import annotations

import math
import statistics


def mann_kendall_z(ys: list[float]) -> float:
    """How many standard deviations the series' pairwise order (concordant minus discordant pairs)
    lies from a series with no trend; positive when it climbs. Ties count for neither."""
    n = len(ys)
    s = sum((ys[j] > ys[i]) - (ys[j] < ys[i]) for i in range(n) for j in range(i + 1, n))
    var = n * (n - 1) * (2 * n + 5) / 18
    if var <= 0 or s == 0:
        return 0.0
    return (s - math.copysign(1, s)) / math.sqrt(var)


def theil_sen(xs: list[float], ys: list[float]) -> float:
    """The median of pairwise slopes: a trend that a few outlying points (spikes) cannot move."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]]
    return statistics.median(slopes) if slopes else 0.0
