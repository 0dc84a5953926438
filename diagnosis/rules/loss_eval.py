"""A held-out metric at chance: what the training loss cannot say (issue 54), fault class ``loss_stalled``.

A training loss that falls says the model fits its batches, not that it learned the task: an IMDB
classifier's loss falls 6 % from ln 2 in 20 epochs, each epoch below the last, while its validation
accuracy stays at a coin's 0.50-0.51 (issue 54's fresh batch 10); two 30-class butterfly classifiers
and a TIMIT LSTM sit a few per cent under ln(classes), where a slow learner sits too. Held-out data
tells them apart: ``train``/``eval`` events (docs/events.md) carry the trainer's metrics on it and,
where it knows them, each one's ``chance``: the value of a model that ignores its input.

An evaluation is at chance when every metric it gives a chance for, in a known direction, sits there:

* a loss (lower is better) not a tenth below its chance, ln(classes) or the class prior's entropy: the
  tenth by which a first loss under 9/10 of a guess's is a trained model's (loss_start.UNTRAINED);
* a share (higher is better, chance below 1: an accuracy; a correlation, whose chance is 0) less than a tenth
  of the way from chance to perfect (a coin's 0.5 to 0.55; 1/30 to 0.13; a Spearman correlation up to 0.1: a
  regressor predicting its target's mean, fresh batch 11's CRISPR model at -0.013 to 0.011), or any share
  whose chance is 1/classes while the loss
  beside it is a uniform guess's (within 2 % of ln(classes)): that guess scores the held-out set's
  commonest share, which 1/classes is only for even classes; not a share :data:`FAR` of the way to perfect or more
  (over-fitting's confident errors raise a held-out loss through ln(classes) while its answers stay right), nor beside
  a held-out loss that was a learned model's (a tenth under its chance) at an earlier evaluation: back at a guess's
  from there, it is over-fitting's, and the share answers for itself (:func:`_came_back`, loss round 49).

:data:`EVALS` evaluations in a row at chance are one finding (an alert, never a rollback: no checkpoint
holds a model that learned more), but not while a held-out loss is still coming down onto a guess's from
above: above its chance (a guess's loss) at its latest evaluation, and falling over the run at chance (its
latest :data:`FALLS_KEPT`), each evaluation mostly below the ones before it (a Mann-Kendall fall at the two-
sided 5 % level, :data:`FALLING_Z`: over five evaluations, every one below the last) and by :data:`LEARNED`
in all. A network from random weights starts its held-out loss above ln(classes), and a slow learner brings
it down onto chance and through it at a guess's accuracy (issue 54's fresh batch 13: a ConvLSTM at lr
1.9e-5, val_loss 2.316, 2.220, 2.213, 2.201, 2.162, 2.166, 2.131 against ln 8 = 2.079 and val_acc 0.06-0.13
over its first seven epochs, 0.94 by its last): it has not yet come to chance, let alone stayed there. A
stall sits, above a guess's or at it: the same script's stalled run wanders at 2.21-2.23 (2.280, 2.226,
2.216, 2.228, 2.224); its run at a 260x learning rate comes back from 2.532 and then sits at 2.08-2.11; a
TIMIT LSTM that learned its class prior falls through ln 1947 onto the prior's entropy, below a guess's, and
is judged as it stood (fresh batch 6). Nor while a held-out loss at chance falls at each of the latest
:data:`EVALS` evaluations by more than at the one before, each fall :data:`PACE` of its level at least
(:func:`~diagnosis.rules.loss_eval_falls.gathering_pace`): a plateau ending, whose falls grow as the model leaves chance (fresh batch 17's MNIST
CNN at ln 10, val_loss 2.3038, 2.3007, 2.2974, 2.2937, 2.2886: falls of 0.0031, 0.0033, 0.0037, 0.0051, then
0.0078, 0.0136, 0.0277, 0.0769; 1.85 at its tenth epoch, 0.33 by its last), where a loss settling onto a level
falls by less each time (the TIMIT LSTM onto its prior). Nor while, over the latest :data:`EVALS` evaluations, the
held-out loss falls at each (a Mann-Kendall fall at :data:`FALLING_Z`) by :data:`DROP` of its level in all and the
training loss logged last before each falls at each too, whichever side of chance either sits (:func:`~diagnosis.rules.loss_eval_falls.both_falling`):
both say the model still learns, and what it learns reaches held-out data (fresh batch 46's Conv1D classifier from
scratch: val_loss 2.4073, 2.4051, 2.4050, 2.3832, 2.3405 and on through ln 10 to 2.2354 at its 11th epoch, its
training loss 3.13 to 2.06, held-out accuracy 0.1000 until it climbs to 0.76). A held-out loss creeping onto a guess's
from above beside a training loss doing the same falls by less (fresh batch 44's stock-chart CNNs, 0.2-0.4 % over
five, onto ln 2); a stall's held-out loss sits, whatever its training loss does (fresh batch 10's IMDB classifier).
The same reading, a held-out loss seen once or falling so
(:meth:`HeldOutWatch.leaving`), keeps the training loss's "at chance" and "never learned" waiting (loss_chance.py,
loss_stalled.py). One that leaves chance is a run that learned something that generalises: it ends the run of
evaluations, and quiets the "never learned" the training loss's shape alone
would say (loss_stalled.py). A loss first seen mid-run, a fine-tune, a pretrained start: the chance level is
absolute, as ln(classes) is for the training loss, so no start needs saying here.

The held-out loss also answers for a plateau of the training loss (:meth:`HeldOutWatch.falling`): one still
falling over the latest evaluations (a Mann-Kendall fall at :data:`FALLING_Z`), or seen at fewer than
:data:`EVALS` of them, is a model still learning what generalises, chance known or not (loss_stalled.py).
And an evaluated metric at its best yet during a training loss's climb (:meth:`HeldOutWatch.improving`) says
the climb is no divergence: a run coming apart gets worse at what it is evaluated on. A reinforcement-learning
critic regresses onto its own returns, and its loss grows with them as the agent improves (issue 54's fresh
batch 15: a DDPG critic's loss from 100 to 7,000 while its return goes -898 to 7,600); a value loss that climbs
while the return never betters its start is diverging (fresh batch 4's Rainbow DQN, -16 to -112 throughout).

One evaluation at chance is enough once the training loss beside it has fitted its data (``fitted``: under
:data:`FITTED` of a guess's): the :data:`EVALS` wait is for a model still warming up, whose training loss is
still near chance too. A model that fits every training batch and scores a guess's on held-out data learned
nothing that generalises, and more evaluations will not change it (fresh batch 15: a bert-tiny fine-tune read
from an unshuffled file, its training loss 0.0011 on one label's reviews, val_accuracy 0.5000 at its one
evaluation).

A held-out accuracy the same to every digit from the first evaluation of a run watched from an untrained model, while
a held-out loss beside it moved, is a model answering alike for every input (loss_eval_unchanged.py; observe's
``untrained``).
Pure: the same live and replayed.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from faultlens.diagnosis.rules.base import Finding
from faultlens.diagnosis.rules.loss_eval_falls import DROP, EVALS, FALLING_Z, PACE, both_falling, gathering_pace  # noqa: F401
from faultlens.diagnosis.rules.loss_eval_unchanged import FirstShares
from faultlens.diagnosis.rules.loss_plateau import LEARNED
from faultlens.diagnosis.rules.loss_trend import mann_kendall_z
from faultlens.events.envelope import Envelope, as_float
from faultlens.events.payloads_job import TrainEval

LOSS_BAND = 0.1  # of the chance loss: a held-out loss less than this below it is a guess's
SHARE_BAND = 0.1  # of the way from chance to perfect: a held-out accuracy short of it is a guess's
# A share this far from its chance to perfect is a model that answers by its input, a held-out loss at a guess's
# beside it or not (_far): over-fitting, not a guess at the prior (loss round 46).
FAR = 0.5
CHANCE = 0.02  # within this fraction of ln(classes): a uniform guess's loss (loss_stalled.py's "at chance")
# The fall is judged over at most this many latest evaluations at chance: a descent that ended long
# ago would hold the trend test down for dozens more (5 falling, then 40 flat: z -2.0), so a loss that
# came down and then sat above a guess's is found some EVALS evaluations late, not never.
FALLS_KEPT = 2 * EVALS
# A training loss under this share of a guess's has fitted its batches (a tenth, as LOSS_BAND is of chance
# for a held-out loss that learned): no warm-up is left for more evaluations to wait out.
FITTED = 0.1
HISTORY = 2000  # each metric's latest evaluations kept for improving(): a loss curve's longest window


def at_chance(value: float, chance: float, higher: bool) -> bool | None:
    """Whether a held-out value is a guess's (module docstring); None where its chance says nothing (a
    share whose chance is not a fraction below 1, a loss whose chance is not above 0)."""
    if higher:
        if not 0 <= chance < 1:
            return None
        return value <= chance + SHARE_BAND * (1 - chance)
    if chance <= 0:
        return None
    return value >= (1 - LOSS_BAND) * chance


def judged(payload: TrainEval, came_back: frozenset[str] = frozenset()) -> dict[str, tuple[float, float, bool]] | None:
    """The evaluation's metrics that say where chance is, each (value, chance, at chance); None when
    none does (the evaluation tells nothing either way). ``came_back``: the held-out losses that were a learned
    model's before (:func:`_came_back`), whose guess's level says nothing of the shares beside them."""
    out: dict[str, tuple[float, float, bool]] = {}
    for name, raw in (payload.metrics or {}).items():
        value, chance = as_float(raw), (payload.chance or {}).get(name)
        higher = TrainEval.direction(name, payload.higher_is_better)
        if value is None or not math.isfinite(value) or chance is None or higher is None:
            continue
        verdict = at_chance(value, float(chance), higher)
        if verdict is not None:
            out[name] = (value, float(chance), verdict)
    return _guessed(out, came_back) or None


def _guessed(out: dict[str, tuple[float, float, bool]],
             came_back: frozenset[str] = frozenset()) -> dict[str, tuple[float, float, bool]]:
    """A held-out loss within :data:`CHANCE` of ln(classes) is a uniform guess's, and then so is its
    accuracy where that accuracy's chance is 1/classes, a guess at the prior: a model answering alike
    for every input argmaxes one class and scores that class's share of the held-out set, which is 1/classes
    only when the classes are even (issue 54's fresh batch 12: a three-way BTC model at val_loss 1.0974
    against ln 3 = 1.0986 scores 0.47, then 0.27, the held-out set's shares). Not a held-out loss in ``came_back``:
    one that climbed to a guess's from a learned model's is over-fitting's, whose shares answer for themselves
    (:func:`_came_back`)."""
    guess = [c for name, (v, c, _) in out.items() if c > 0 and abs(v - c) <= CHANCE * c and name not in came_back]
    return {
        name: (v, c, True) if any(0 < c < 1 and math.isclose(c, math.exp(-g)) for g in guess) and not _far(v, c)
        else (v, c, at)
        for name, (v, c, at) in out.items()
    }


def _came_back(history: dict[str, deque], payload: TrainEval) -> frozenset[str]:
    """The held-out losses of the evaluation (``payload``) with a known chance that were, at an earlier evaluation, more
    than :data:`LOSS_BAND` below it: a learned model's, not a guess's. A held-out loss back at ln(classes) from there
    is over-fitting's confident errors (the training loss fitted, the held-out loss climbing), not a model answering
    alike for every input, so the shares beside it are judged by their own band, not taken for a guess's at the prior
    (issue 54, fresh batch 48's CIFAR-100 classifier from scratch: val_loss 2.78 at epoch 6, back to 4.519 within 2 %
    of ln 100 at epoch 29 beside a training loss of 0.0104, val_acc 0.3045, thirty times a guess's; loss round 49)."""
    out = set()
    for name, chance in (payload.chance or {}).items():
        kept = history.get(name)
        if kept is None or len(kept) < 2 or kept[0][2] or chance is None or float(chance) <= 0:
            continue
        bar = (1 - LOSS_BAND) * float(chance)
        if any(v < bar for _, v, _ in itertools.islice(kept, len(kept) - 1)):
            out.add(name)
    return frozenset(out)


def _far(value: float, chance: float) -> bool:
    """Whether a share is at least :data:`FAR` of the way from its chance to perfect: a model that discriminates,
    whatever its held-out loss says. Over-fitting's confident errors raise a held-out loss back through ln(classes)
    while the answers stay right (fresh45's IMDB classifier: val_loss 0.6877 against ln 2 at val_acc 0.8754); one
    class answered for every input scores its share of the held-out set: beside a guess's loss, the corpus's stalled
    runs reach 0.207 of the way (fresh12's BTC model, 0.47 against a third; loss round 46's margin)."""
    return value >= chance + FAR * (1 - chance)


@dataclass(slots=True)
class _Evals:
    """One job's evaluations, as its lowest reporting rank sends them."""

    rank: int
    run: list[tuple[int | None, dict[str, tuple[float, float, bool]]]] = field(default_factory=list)
    learned: bool = False  # the latest judged evaluation left chance
    # each held-out loss over the run at chance, its latest FALLS_KEPT
    falls: dict[str, list[float]] = field(default_factory=dict)
    # the training loss the trainer logged last before each evaluation of the run at chance, its latest EVALS
    beside: list[float] = field(default_factory=list)
    # each held-out loss over the whole run, chance known or not, its latest FALLS_KEPT (falling())
    losses: dict[str, list[float]] = field(default_factory=dict)
    # each metric whose direction is known, (step, value, higher is better), its latest HISTORY (improving())
    history: dict[str, deque] = field(default_factory=dict)
    fired: bool = False
    answers: FirstShares = field(default_factory=FirstShares)  # each held-out share while unchanged from its first
    # the training loss the trainer logged last before each evaluation of the whole run, its latest EVALS (what
    # both_falling reads beside the held-out losses while a share is unchanged: loss round 48)
    trained: list[float] = field(default_factory=list)


class HeldOutWatch:
    """``train``/``eval`` payloads in, a ``loss_stalled`` finding out when :data:`EVALS` in a row sit at
    chance; :meth:`learned` tells the stalled-loss detector the held-out metric's last word."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Evals] = {}

    def restarted(self, job: str) -> None:
        self._jobs.pop(job, None)

    def learned(self, job: str) -> bool:
        evals = self._jobs.get(job)
        return evals is not None and evals.learned

    def falling(self, job: str) -> bool:
        """Whether the job's held-out loss has not stopped falling: fewer than :data:`EVALS` evaluations
        of it (too few to say it stopped, as for chance), or a Mann-Kendall fall at :data:`FALLING_Z`
        over its latest :data:`FALLS_KEPT`. False where the trainer has evaluated no loss."""
        evals = self._jobs.get(job)
        return evals is not None and any(
            len(values) < EVALS or mann_kendall_z(values) <= -FALLING_Z for values in evals.losses.values()
        )

    def leaving(self, job: str) -> bool:
        """Whether a held-out loss of the job may be leaving chance (:func:`~diagnosis.rules.loss_eval_falls.gathering_pace`), chance known or
        not: the training loss's "at chance" and "never learned" wait for it. False where the trainer has
        evaluated no loss."""
        evals = self._jobs.get(job)
        return evals is not None and any(gathering_pace(values) for values in evals.losses.values())

    def improving(self, job: str, since: int) -> bool:
        """Whether any evaluated metric of the job reached its best yet from step ``since`` on: one of at
        least :data:`EVALS` evaluations since then better, its better way, than every evaluation before (than
        the first of them, where the run has none before)."""
        evals = self._jobs.get(job)
        if evals is None:
            return False
        for kept in evals.history.values():
            # One pass over up to HISTORY evaluations, each signed its better way up: this runs at every judgement.
            before: list[float] = []
            during: list[float] = []
            for step, v, higher in kept:
                if step is not None:
                    (before if step < since else during).append(v if higher else -v)
            if not before:
                before, during = during[:1], during[1:]
            if before and len(during) >= EVALS and max(during) > max(before):
                return True
        return False

    def better_than_first(self, job: str) -> bool:
        """Whether any evaluated metric of the job is better, its better way, at its latest evaluation than at its
        first (kept): what the run learned on held-out data is not all lost (loss_diverging.lost_what_it_learned)."""
        evals = self._jobs.get(job)
        return evals is not None and any(
            len(kept) > 1 and (kept[-1][1] > kept[0][1] if kept[-1][2] else kept[-1][1] < kept[0][1])
            for kept in evals.history.values()
        )

    def better_since(self, job: str, best: int, since: int) -> bool:
        """Whether any evaluated metric of the job is better, its better way, from step ``since`` on (the
        median of at least :data:`EVALS` evaluations) than at every evaluation up to step ``best``: where
        the training loss was lowest, the run was evaluated worse than it is now."""
        evals = self._jobs.get(job)
        if evals is None:
            return False
        for kept in evals.history.values():
            signed = [(step, v if higher else -v) for step, v, higher in kept if step is not None]
            then = [v for step, v in signed if step <= best]
            now = [v for step, v in signed if step >= since]
            if then and len(now) >= EVALS and statistics.median(now) > max(then):
                return True
        return False

    def lost_nothing(self, job: str, best: int, since: int, level: float) -> bool:
        """Whether a training loss at ``level`` from step ``since``, above its best at step ``best``, has lost
        nothing the evaluations see: :meth:`better_since` or :meth:`fit_only`."""
        return self.better_since(job, best, since) or self.fit_only(job, best, level)

    def fit_only(self, job: str, best: int | None, level: float) -> bool:
        """Whether a training loss back up to ``level`` from its best (at step ``best``) is no higher than the
        held-out loss (a metric named a loss; the highest, where there are more) the job was last evaluated at
        by then: what it gave back is the fit of its own batches beyond what held out, not what it learned
        (fresh batch 19's solGPT seen from its middle: 0.24-0.29 over iterations 12,000-12,600 against a val
        loss of 0.54-0.59, then 0.42-0.52 with the val loss where it was). False where no loss was evaluated
        by then."""
        if best is None:
            return False
        then = [
            next((v for at, v, _ in reversed(kept) if at is not None and at <= best), None)
            for kept in self.held_losses(job).values()
        ]
        return level <= max((v for v in then if v is not None), default=-math.inf)

    def held_losses(self, job: str) -> dict[str, deque]:
        """Each held-out metric of the job named a loss, lower is better: its (step, value, False) since its first
        evaluation (its latest :data:`HISTORY`). Empty where the trainer evaluated none."""
        evals = self._jobs.get(job)
        if evals is None:
            return {}
        return {name: kept for name, kept in evals.history.items() if "loss" in name.lower() and kept and not kept[0][2]}

    def history(self, job: str) -> dict[str, deque]:
        """Each held-out metric of known direction of the job: its (step, value, higher is better) since its first
        evaluation (its latest :data:`HISTORY`). Empty where the trainer evaluated none."""
        evals = self._jobs.get(job)
        return {} if evals is None else dict(evals.history)

    def told(self, job: str) -> bool:
        """Whether the job's evaluations have raised their finding (one per job until they learn again)."""
        evals = self._jobs.get(job)
        return evals is not None and evals.fired

    def observe(self, event: Envelope, payload: TrainEval, told: bool, fitted: bool = False,
                untrained: bool = False, training: float | None = None) -> list[Finding]:
        """``told``: the job's loss curve already raised its finding (one per job); ``fitted``: its training
        loss is under :data:`FITTED` of a guess's (one evaluation at chance is then enough); ``untrained``: the
        curve was watched from an untrained model (a held-out share unchanged from its first evaluation is then
        a model answering alike for every input: loss_eval_unchanged.py)."""
        rank = payload.rank
        if rank is None:
            return []
        evals = self._jobs.get(event.job)
        if evals is None or rank < evals.rank:
            evals = self._jobs[event.job] = _Evals(rank)
        if rank != evals.rank:
            return []
        _keep_losses(evals.losses, payload)
        _keep_history(evals.history, payload)
        evals.answers.add(payload)
        if training is not None and math.isfinite(training):
            evals.trained.append(training)
            del evals.trained[:-EVALS]
        found = self._at_chance(event, evals, payload, told, fitted, training)
        if found or told or evals.fired or not untrained:
            return found
        # A held-out loss and the training loss both still falling: the model still learns what reaches held-out
        # data, and its answers may yet move (fresh batch 47's LeNet, val_acc 0.1000 at its first five epochs while
        # val_loss fell 2.379 to 2.308 and its training loss 3.156 to 2.310; loss round 48).
        if any(both_falling(values, evals.trained) for values in evals.losses.values()):
            return []
        why = evals.answers.unchanged(rank, EVALS)
        if why is None:
            return []
        evals.fired = True
        return [_finding(event, rank, why)]

    @staticmethod
    def _at_chance(event: Envelope, evals: _Evals, payload: TrainEval, told: bool, fitted: bool,
                   training: float | None = None) -> list[Finding]:
        """The run of evaluations at chance, and its finding once :data:`EVALS` long (module docstring)."""
        metrics = judged(payload, _came_back(evals.history, payload))
        if metrics is None:
            return []
        if not all(verdict for _, _, verdict in metrics.values()):
            evals.run.clear()
            evals.falls.clear()
            evals.beside.clear()
            evals.learned, evals.fired = True, False  # learning: a later stall is a new finding
            return []
        evals.learned = False
        evals.run.append((payload.step, metrics))
        del evals.run[:-EVALS]
        if training is not None and math.isfinite(training):
            evals.beside.append(training)
            del evals.beside[:-EVALS]
        for name, (value, _, _) in metrics.items():
            if TrainEval.direction(name, payload.higher_is_better) is False:
                values = evals.falls.setdefault(name, [])
                values.append(value)
                del values[:-FALLS_KEPT]
        if (len(evals.run) < EVALS and not fitted) or evals.fired or told or _coming_down(evals):
            return []
        evals.fired = True
        return [_finding(event, evals.rank, _detail(evals))]


def _finding(event: Envelope, rank: int, detail: str) -> Finding:
    return Finding(job=event.job, ts=event.ts, fault="loss_stalled", action="alert", ranks=(rank,), entity="loss",
                   evidence=(event.id,), detail=detail[:300])


def _keep_losses(losses: dict[str, list[float]], payload: TrainEval) -> None:
    """Each lower-is-better held-out metric's value, chance or not (a reconstruction's, a regression's)."""
    for name, raw in (payload.metrics or {}).items():
        value = as_float(raw)
        if value is not None and math.isfinite(value) and TrainEval.direction(name, payload.higher_is_better) is False:
            values = losses.setdefault(name, [])
            values.append(value)
            del values[:-FALLS_KEPT]


def _keep_history(history: dict[str, deque], payload: TrainEval) -> None:
    """Each metric of known direction, stamped with its step: what improving() reads."""
    for name, raw in (payload.metrics or {}).items():
        value, higher = as_float(raw), TrainEval.direction(name, payload.higher_is_better)
        if value is not None and math.isfinite(value) and higher is not None:
            history.setdefault(name, deque(maxlen=HISTORY)).append((payload.step, value, higher))


def _coming_down(evals: _Evals) -> bool:
    """Whether a held-out loss is still coming down onto a guess's from above, or leaving it (module
    docstring): the evaluations wait until it sits."""
    latest = evals.run[-1][1]
    return any(
        name in latest
        and (
            (values[-1] > latest[name][1] and values[-1] <= (1 - LEARNED) * values[0]
             and mann_kendall_z(values) <= -FALLING_Z)
            or (len(values) >= EVALS and gathering_pace(values))
            or both_falling(values, evals.beside)
        )
        for name, values in evals.falls.items()
    )


def _detail(evals: _Evals) -> str:
    steps = [s for s, _ in evals.run if s is not None]
    where = f" (steps {steps[0]}-{steps[-1]})" if steps else ""
    parts = []
    for name, (_, chance, _) in evals.run[-1][1].items():
        values = [m[name][0] for _, m in evals.run if name in m]
        parts.append(f"{name} {min(values):.4g}-{max(values):.4g} (chance {chance:.4g})")
    return (
        f"held-out {', '.join(parts)} at chance over the last {len(evals.run)} evaluations{where}: the model has "
        f"learned nothing of its task that generalises (rank {evals.rank})"
    )
