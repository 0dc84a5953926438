"""A run that learned a little, then stopped: the stalled-loss detector's plateau form (docs/design.md §3).

"At chance" needs the class count and "never learned" an untrained start nobody may have said. A run
stuck at its class prior, a unigram distribution or its data's variance sits at a level no step event
carries (issue 54, fresh batch 6: an LSTM 9 % below ln 1947, a VAE's reconstruction at 1.0, an EEG
autoencoder 6 % below its first epoch). What a person sees instead is the curve's own shape: a short
fall from the first loss, then a plateau that does not move for many times as long as that fall took,
at a level a small share below where the run began, while the learning rate (where steps say it) is
still near its peak. A healthy run's plateau comes after it learned most of its first loss away, keeps
falling by a trend test, or comes with a decayed schedule; a run first seen mid-way (resumed, its hook
counting steps from 1) shows no fall from its first loss beyond its own noise.
"""

from __future__ import annotations

import statistics

from faultlens.diagnosis.rules.loss_trend import theil_sen

LITTLE = 0.25  # learned at most this share of its first loss: a little
PLATEAU_TIMES = 5.0  # the plateau lasted this many times as long as the fall before it
PLATEAU_WINDOWS = 2  # and at least this many judged windows
REACHED = 0.2  # the plateau began where the loss came within this share of its fall from the level
MOVE = 0.1  # across the plateau, a trend worth less than this share of the fall: not moving
LR_PEAK = 0.5  # the latest learning rate at least this share of the highest the run said: near its peak
NOISE = 3.0  # the fall exceeds this many robust sigmas of the window's losses
LEARNED = 0.05  # and this share of the first loss (what "learned" means to the detector)


def lr_decayed(latest: float | None, peak: float | None) -> bool:
    """Whether the learning rate the steps said last (``latest``) has decayed below ``LR_PEAK`` of the highest
    they said (``peak``): a schedule near its end, whose weights barely move by design. False where the steps
    say none."""
    return latest is not None and peak is not None and latest < LR_PEAK * peak


def stopped_early(
    losses: list[tuple[int, float]],
    first: float,
    first_step: int,
    level: float,
    noise: float,
    size: int,
    stride: float,
    decayed: bool,
) -> str | None:
    """Why the curve learned a little and stopped, or None. ``losses`` are the (step, loss) the detector
    holds (its last ``MAX_WINDOW``), ``first`` and ``first_step`` the run's first loss and its step (near
    the start: the caller checks it was watched from its start), ``level`` and ``noise`` the judged
    window's median and robust sigma, ``size`` the window in points and ``stride`` the steps between them."""
    if first <= 0 or level <= 0:
        return None  # a surrogate or likelihood loss: its share of a level says nothing
    fell = first - level
    if not (LEARNED * first <= fell <= LITTLE * first) or fell < NOISE * noise:
        return None
    if decayed:
        return None  # the schedule decayed: a plateau it made, as every converged run's
    # Blocks of a tenth of a window, at most 50 of them: the trend over them costs their count squared.
    per = max(1, size // 10, len(losses) // 50)
    blocks = [losses[i : i + per] for i in range(0, len(losses) - per + 1, per)]
    medians = [(blk[-1][0], statistics.median(v for _, v in blk)) for blk in blocks]
    # The plateau began at the first block within REACHED of its fall from the level: the fall before it
    # took from the run's first step to there (a curve first seen mid-way holds less: its fall is longer).
    began = next((s for s, m in medians if m <= level + REACHED * fell), None)
    if began is None:
        return None
    last = losses[-1][0]
    took = max(began - first_step, stride)
    lasted = last - began
    if lasted < PLATEAU_TIMES * took or lasted < PLATEAU_WINDOWS * size * stride:
        return None
    since = [(s, m) for s, m in medians if s >= began]
    if len(since) < 3:
        return None
    moved = -theil_sen([s for s, _ in since], [m for _, m in since]) * (since[-1][0] - since[0][0])
    if moved >= MOVE * fell:
        return None
    return (
        f"loss {level:.4g} fell {fell / first:.0%} from its first {first:.4g} by step {began}, then no further "
        f"for {lasted} steps ({lasted / took:.0f}x as long as that fall took): learned a little, then stopped"
    )
