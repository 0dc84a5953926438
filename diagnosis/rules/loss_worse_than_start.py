"""A run trained from random weights that ends worse than it began, on its held-out data and its training batches
alike: the stalled-loss detector's "worse than its start" (loss_stalled.py, docs/design.md §3), judged at an evaluation.

Watched from an untrained model, a run's first loss is a random init's, a guess's or about it. Training that works
brings its training loss and its held-out loss below it; one that over-fits leaves its held-out loss above while its
training loss falls far below. Both a tenth above the start (and above a guess's, ln(classes), where the class count is
said) a window's worth of steps on is a model worse than the random one it came from: it blew up (issue 54, fresh batch
24: a 1.3B LLaMA pretraining in fp16, 10.65 at iteration 1, 12.5-13.4 at 2498-2500 with its loss scale at 1,
validation 13.60 against ln 32000 = 10.37; its log keeps 6 iterations, too few for any window).

Neither alone says it: a training loss above its start is a batch's spike, or a warm-up's rise at once (fresh batch 24's
Llama-3.1-8B, 12.3 then 26 at step 2, 5.1 by step 20); a held-out loss above it is an over-fitted classifier's. Nor does
an evaluation inside the first window of steps: the init is still settling (fresh batch 9's butterfly CNN, val_loss 7.53
against its first 3.40 at step 24 of a 10-step log, then learning). Whatever the start (a fine-tune's is a trained
model's), the same reading against where the run was first seen, over evaluations on end: worse_than_first_seen. Pure:
the state is the curve's (loss_curve.LossCurve).
"""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.loss_curve import LossCurve, Verdict
from faultlens.diagnosis.rules.loss_eval import FALLING_Z, FITTED
from faultlens.diagnosis.rules.loss_trend import mann_kendall_z
from faultlens.events.envelope import as_float

ABOVE = 0.1  # above the start by this share of it: the tenth a spike and a divergence are measured in


def worse_than_start(curve: LossCurve, step: int, metrics: dict, window: int) -> Verdict | None:
    """The verdict at an evaluation at ``step`` of ``metrics`` (a held-out loss: a name saying ``loss``), for a curve
    the caller has found watched from its untrained start, once ``window`` logged steps' worth of steps have passed."""
    first, since = curve.first, curve.first_step
    if first is None or since is None or first <= 0 or curve.signed or not curve.losses:
        return None
    if step - since < window * curve.stride():
        return None
    guess = math.log(curve.classes) if curve.classes else None
    bar = (1 + ABOVE) * max(first, guess or 0.0)
    latest = curve.losses[-1][1]
    held = [
        (name, value)
        for name, value in ((n, as_float(v)) for n, v in metrics.items())
        if "loss" in name.lower() and value is not None and math.isfinite(value) and value > bar
    ]
    if latest <= bar or not held:
        return None
    name, value = held[0]
    said = f" and a guess's ln({curve.classes}) = {guess:.4g}" if guess is not None else ""
    return Verdict(
        f"held-out {name} {value:.4g} and training loss {latest:.4g} at step {step}, both a tenth above the "
        f"{first:.4g} it began at, untrained (step {since}){said}: worse than its start",
        rollback=False,
    )


def worse_than_first_seen(curve: LossCurve, held: dict, step: int, evals: int) -> Verdict | None:
    """A run worse than where it was first seen, whatever its start: every held-out loss evaluation since its first
    (``held``: loss_eval.HeldOutWatch.held_losses), ``evals`` of them at least, a tenth above that first, and every
    training loss logged since the run's first a tenth above it (issue 54, fresh batch 25: a Whisper-small fine-tune at
    a learning rate of 3e-3, eval_loss 2.553 at its first epoch, 3.14-4.46 at each of 19 more; training loss 1.2366,
    then 1.79-2.16 at each of 4 logs). Training that works brings one of them back below its first: an over-fitted
    model's training loss falls far below it while its held-out loss climbs, and a warm-up's rise or a spike on the
    training batches comes back. Both held above their first for evaluations on end is a model the training has made
    worse on the data it trains on and on held-out data: a learning rate that ruined what the model knew, or a blow-up.
    The caller holds it back while an evaluated metric reaches its best yet (an accuracy climbing while the held-out
    loss grows more confident on what it misses)."""
    first, latest = curve.first, curve.losses[-1][1] if curve.losses else None
    seen_since = curve.low_since_first  # inf until a second training loss
    if first is None or latest is None or first <= 0 or curve.signed or not (1 + ABOVE) * first < seen_since < math.inf:
        return None
    for name, kept in held.items():
        values = [v for _, v, _ in kept]
        if values[0] > 0 and len(values) > evals and min(values[1:]) > (1 + ABOVE) * values[0]:
            return Verdict(
                f"held-out {name} {min(values[1:]):.4g}-{max(values[1:]):.4g} at each of {len(values) - 1} evaluations "
                f"to step {step}, training loss {curve.low_since_first:.4g}-{curve.peak:.4g} since its first, both a tenth "
                f"above their firsts ({values[0]:.4g} held out, {first:.4g} in training): worse than where it was first seen",
                rollback=False,
            )
    return None


def fell_back_from_first(curve: LossCurve, history: dict, step: int, evals: int) -> Verdict | None:
    """Watched from an untrained model (the caller's), every held-out metric of known direction (``history``: its
    ``(step, value, higher)`` since its first evaluation, loss_eval.HeldOutWatch.history) worse, its better way, than at
    its first evaluation at each of the latest ``evals`` evaluations (ten: twice loss_eval.EVALS) since that first,
    an accuracy among them, while the training loss logged over them has no fall (no Mann-Kendall fall at FALLING_Z) and
    has fitted nothing (its latest median at least FITTED of a guess's, ln(classes)): what the first epoch learned is lost
    on held-out data, and training does not bring it back (issue 54, fresh batch 48's NumPy MLP at RMSprop lr 0.1: 3.12 at
    its first epoch, then 1.7-2.0; held-out accuracy 0.29 at its first evaluation, 0.16-0.21 at each of epochs 6-20, its
    held-out loss 1.80 then 1.85-2.00). An over-fitting run's training loss falls, or has fitted its batches; a run
    still learning betters its first evaluation somewhere."""
    if curve.classes is None or curve.signed or len(curve.losses) < evals:
        return None
    shares = 0
    for kept in history.values():
        values = [(v if higher else -v) for at, v, higher in kept if at is not None]
        if len(values) <= evals or max(values[-evals:]) >= values[0]:
            return None
        shares += any(higher for _, _, higher in kept)
    if not shares:
        return None
    since = [at for at, _, _ in next(iter(history.values()))][-evals]
    training = [v for s, v in curve.losses if since is not None and s >= since]
    if len(training) < evals or mann_kendall_z(training) <= -FALLING_Z:
        return None
    if sorted(training)[len(training) // 2] < FITTED * math.log(curve.classes):
        return None
    parts = ", ".join(f"{name} {kept[0][1]:.4g} at first" for name, kept in history.items())
    return Verdict(f"every held-out metric worse than at its first evaluation ({parts}) at each of the latest {evals} "
                   f"evaluations to step {step}, the training loss without a fall over them: lost what its first "
                   f"epoch learned", rollback=False)
