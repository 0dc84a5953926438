"""Loss round 44 (issue 54, fresh batch 41 opened): a run that learned and then lost all of it, held.

fresh41's six stalled runs were all found on the round's base (four by their NaNs, the two KTH runs by a held-out loss
above a guess's), so the round read the misses left in fresh1-40 for a general form:

* training losses alone (loss_diverging.lost_what_it_learned): after a loss below half its first, the latest 5 logs
  each twice every loss before them, its first among them, 5 logs at least before them (fresh batch 11's GPT-2 in
  fp32: 10.93 to 4.82, then 270.4 coming down through 68.6);
* beside a held-out loss (loss_diverging.lost_what_it_learned_held_out): at an evaluation, a held-out loss that fell
  below half its first evaluation back at or above that first, the latest 5 training logs each twice the lowest the run
  reached (fresh batch 30's wav2vec2: eval_loss 2,691, down to 680, then 2,797; training 2,114, then 8,166-8,629).

Neither while an evaluated metric is better at its latest evaluation than at its first. Each is written here as a
curve; the near misses beside each stay quiet."""

from __future__ import annotations

import pytest

from faultlens.diagnosis.rules.loss_curve import LossCurve
from faultlens.diagnosis.rules.loss_diverging import lost_what_it_learned, lost_what_it_learned_held_out
from faultlens.diagnosis.rules.loss_eval import HeldOutWatch
from faultlens.events.payloads import typed
from faultlens.events.payloads_job import TrainEval
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import evaluation, replay, step

LOST = "lost what it learned"
FOUND = [
    CURVES / "fresh11" / "minlora_gpt2_fp32_loss_explodes_at_iter_110.csv",
    CURVES / "fresh30" / "wav2vec2_xlsr_ctc_finetune_learned_to_2114_then_collapsed_to_8600_cer_1.0_lr_3e-4.csv",
]


@pytest.mark.parametrize("how", [{}, {"window_s": 0.0}], ids=["own-window", "shortest-window"])
@pytest.mark.parametrize("path", FOUND, ids=lambda p: p.parent.name)
def test_the_two_runs_that_lost_what_they_learned_are_found_from_their_start(path, how):
    outcome = judge(path, **how)
    assert outcome.right and outcome.faults == ("loss_stalled",)
    assert outcome.at is not None and outcome.at < 0.9  # said while some of the run is left


def test_fresh41_is_found_whole_and_its_healthy_runs_stay_quiet():
    outcomes = [judge(p) for p in sorted((CURVES / "fresh41").glob("*.csv"))]
    assert sum(o.expect != "quiet" for o in outcomes) == 6 and sum(o.expect == "quiet" for o in outcomes) == 5
    assert all(o.right for o in outcomes), [o for o in outcomes if not o.right]


# -- training losses alone ---------------------------------------------------------------------------------------------

LEARNING = [10.93, 9.90, 9.04, 7.84, 6.60, 6.09, 5.86, 5.66, 5.30, 5.06, 4.82]  # the GPT-2's fall, below half its first


def _lost(after: list[float], before: list[float] = LEARNING) -> list:
    return [step(10 * i, loss) for i, loss in enumerate([*before, *after])]


def test_a_run_that_learned_then_lost_it_all_and_more_is_found_at_its_fifth_log_above():
    found = replay(_lost([270.4, 182.7, 121.9, 96.7, 68.6]))
    assert [f.fault for f in found] == ["loss_stalled"] and LOST in found[0].detail
    assert "steps 110-150" in found[0].detail and "(rank 0, step 150)" in found[0].detail


@pytest.mark.parametrize("before, after", [
    (LEARNING, [270.4, 182.7, 121.9, 96.7]),  # 4 logs: a spike may yet come back
    (LEARNING, [270.4, 182.7, 121.9, 96.7, 8.0]),  # came back
    (LEARNING, [21.0, 21.5, 20.9, 21.2, 21.4]),  # under twice its first (21.86)
    ([10.93, 9.90, 9.04, 7.84, 6.60, 6.09, 5.86, 5.66], [30.0, 31.0, 29.0, 30.5, 30.2]),  # never below half its first
    ([10.93, 6.0, 4.8, 4.6], [30.0, 31.0, 29.0, 30.5, 30.2]),  # 4 logs before: too few to say it learned
])
def test_near_misses_of_losing_what_was_learned_stay_quiet(before, after):
    assert replay(_lost(after, before)) == []


def test_a_first_loss_near_zero_or_a_signed_loss_is_no_level_to_lose():
    assert replay(_lost([3e-3] * 5, [1e-3, 8e-4, 6e-4, 5e-4, 4e-4, 4e-4])) == []
    curve = LossCurve(0)
    for i, loss in enumerate([*LEARNING, -0.1, 270.4, 182.7, 121.9, 96.7, 68.6]):
        curve.hold(10 * i, loss)
    curve.first, curve.lowest, curve.signed = LEARNING[0], -0.1, True
    assert lost_what_it_learned(curve) is None


def _with_return(losses: list[float], returns: list[float]) -> list:
    """A loss at each step and an evaluation of the agent's return after each of the last ``len(returns)``."""
    events = []
    for i, loss in enumerate(losses):
        events.append(step(10 * i, loss))
        at = i - (len(losses) - len(returns))
        if at >= 0:
            events.append(evaluation(10 * i, {"return": returns[at]}, higher_is_better={"return": True}))
    return events


def test_a_loss_that_grows_while_an_evaluated_metric_is_better_than_at_its_first_is_not_lost():
    # An RL critic's loss grows with the return it learns to predict: held back while the return betters its first.
    losses = [*LEARNING, 270.4, 182.7, 121.9, 96.7, 68.6]
    assert replay(_with_return(losses, [-5.0, -3.0, 1.0, 4.0, 9.0, 12.0])) == []
    found = replay(_with_return(losses, [-5.0, -9.0, -12.0, -20.0, -30.0, -40.0]))
    assert [f.fault for f in found] == ["loss_stalled"] and LOST in found[0].detail


# -- beside a held-out loss --------------------------------------------------------------------------------------------

TRAIN = [25446, 8560, 8622, 8448, 8203, 8324, 7785, 7541, 7135, 5424, 4348, 3768, 3518, 3387, 3026, 2746, 2606, 2623,
         2602, 2426, 2272, 2114, 2172, 2156, 2138]  # the wav2vec2's, down to 2,114
EVALS = {4: 2690.6, 9: 1366.2, 14: 828.2, 19: 686.6, 24: 680.2}  # after these logs: 2,691 down to 680


def _collapse(climb: list[float], last_eval: float, more: dict | None = None) -> list:
    """The curve above, then ``climb`` and an evaluation of ``last_eval`` after its last log; ``more``: other metrics
    at every evaluation, (first, then the rest)."""
    events = []
    evals = {**EVALS, len(TRAIN) + len(climb) - 1: last_eval}
    for i, loss in enumerate([*TRAIN, *climb]):
        events.append(step(50 * (i + 1), loss))
        if i in evals:
            metrics = {"val_loss": evals[i]}
            if more:
                metrics.update({k: (v[0] if i == 4 else v[1]) for k, v in more.items()})
            events.append(evaluation(50 * (i + 1), metrics))
    return events


CLIMB = [2249, 2418, 2926, 3462, 4892, 5723, 7678, 8333, 8629, 8595]


def test_a_held_out_loss_back_above_its_first_evaluation_beside_a_training_loss_held_at_twice_its_lowest_is_found():
    found = replay(_collapse(CLIMB, 2797.2))
    assert [f.fault for f in found] == ["loss_stalled"] and LOST in found[0].detail
    assert "back above its first evaluation 2691" in found[0].detail and "(rank 0, step 1750)" in found[0].detail


@pytest.mark.parametrize("climb, last_eval, more", [
    (CLIMB, 2430.0, None),  # held out at 0.9 of its first: not all of it lost
    ([*CLIMB[:-5], 4100, 4150, 4120, 4180, 4160], 2797.2, None),  # training under twice its lowest (4,228)
    ([*CLIMB[:-5], 8333, 8629, 8595, 8600, 2100], 2797.2, None),  # training back at its lowest: a spike, or over-fitting
    (CLIMB, 2797.2, {"val_acc": (0.10, 0.35)}),  # an accuracy better than at its first evaluation
])
def test_near_misses_of_losing_it_on_held_out_data_stay_quiet(climb, last_eval, more):
    assert replay(_collapse(climb, last_eval, more)) == []


def test_a_held_out_loss_that_never_halved_has_learned_too_little_to_lose():
    curve = LossCurve(0)
    for i, loss in enumerate([*TRAIN, *CLIMB]):
        curve.hold(50 * (i + 1), loss)
    curve.first, curve.lowest = TRAIN[0], min(TRAIN)
    halved = {"val_loss": [(250, 2690.6, False), (1250, 680.2, False), (1750, 2797.2, False)]}
    not_halved = {"val_loss": [(250, 2690.6, False), (1250, 1350.0, False), (1750, 2797.2, False)]}
    assert lost_what_it_learned_held_out(curve, halved, 1750) is not None
    assert lost_what_it_learned_held_out(curve, not_halved, 1750) is None
    assert lost_what_it_learned_held_out(curve, halved, 1800) is None  # judged at the evaluation it was given


def test_better_than_first_reads_each_metric_its_better_way_at_its_latest_evaluation():
    watch = HeldOutWatch()
    first = {"val_loss": 2.0, "val_acc": 0.4}

    def observe(i: int, metrics: dict) -> None:
        event = evaluation(i, metrics)
        watch.observe(event, typed(event, TrainEval), told=False)

    observe(1, first)
    assert not watch.better_than_first("j")  # one evaluation: nothing to be better than
    observe(2, {"val_loss": 1.0, "val_acc": 0.3})
    assert watch.better_than_first("j")  # the loss is lower
    observe(3, {"val_loss": 2.5, "val_acc": 0.3})
    assert not watch.better_than_first("j")  # both worse than at the first, though the loss was better once
    observe(4, {"val_loss": 2.5, "val_acc": 0.5})
    assert watch.better_than_first("j")
