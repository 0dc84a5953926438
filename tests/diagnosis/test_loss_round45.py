"""Loss round 45 (issue 54, fresh batches 42 and 43 opened): a loss that blows up without a NaN.

fresh43's two finite blow-ups were missed by every rule that measures a blow-up against the highest loss before it:

* a blow-up that climbs in steps (loss_diverging.blown_up_from_level): the latest 5 logs each ten times the median of
  every loss before them, 5 logs at least before them (fresh batch 43's character CNN: 0.23-0.48, then 3.61, 8.54,
  5.26, 322, 21.9, 131, 4977);
* a jump of four orders of magnitude at one log (loss_diverging.jumped): ten thousand times every loss before it, 5
  logs at least before it (fresh batch 43's PFNL: 0.0087-0.0168, then 1,508,190).

Neither while an evaluated metric is better at its latest evaluation than at its first (an RL critic's loss grows with
the return it learns to predict). Each is written here as a curve; the near misses beside each stay quiet."""

from __future__ import annotations

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import evaluation, replay, step

FRESH43 = CURVES / "fresh43"
FOUND = [
    FRESH43 / "char_cnn_text_classifier_issue_steps_3866_to_3879_loss_0.23_to_0.48_then_3.6_to_4977_acc_0.93_to_0.23.csv",
    FRESH43 / "pfnl_video_sr_issue_steps_30020_to_30200_loss_0.0087_to_0.0168_then_1508190_at_30220_model_collapsed.csv",
]


@pytest.mark.parametrize("path", FOUND, ids=["char-cnn", "pfnl"])
def test_the_two_finite_blow_ups_are_found(path):
    outcome = judge(path)
    assert outcome.right and outcome.faults == ("loss_stalled",)


def test_the_character_cnn_is_found_with_logs_left():
    outcome = judge(FOUND[0])
    assert outcome.at is not None and outcome.at < 0.9


@pytest.mark.parametrize("folder", ["fresh42", "fresh43"])
def test_the_healthy_runs_of_both_batches_stay_quiet(folder):
    outcomes = [judge(p) for p in sorted((CURVES / folder).glob("*.csv"))]
    assert all(o.right for o in outcomes if o.expect == "quiet")


# -- blown up from its level, in steps ---------------------------------------------------------------------------------

LEVEL = [0.433, 0.479, 0.257, 0.274, 0.232]  # the character CNN's level


def _run(losses: list[float]) -> list:
    return [step(i, loss) for i, loss in enumerate(losses)]


def _details(losses: list[float]) -> list[str]:
    return [f.detail for f in replay(_run(losses)) if f.fault == "loss_stalled"]


def test_a_loss_ten_times_its_level_at_five_logs_in_a_row_is_blown_up_at_the_fifth():
    found = replay(_run([*LEVEL, 3.61, 8.54, 5.26, 322.3, 21.9]))
    assert len(found) == 1 and "blown up from its level" in found[0].detail
    assert replay(_run([*LEVEL, 3.61, 8.54, 5.26, 322.3])) == []


@pytest.mark.parametrize("after", [
    [3.61, 8.54, 5.26, 322.3, 2.1],  # one log back under ten times the level: a spike's way back
    [2.0, 2.4, 2.2, 2.3, 2.1],  # five times the level at every log: no blow-up by this measure
])
def test_a_climb_under_ten_times_its_level_at_any_of_five_logs_stays_quiet(after):
    assert _details([*LEVEL, *after]) == []


def test_four_logs_before_are_no_level():
    assert [d for d in _details([*LEVEL[:4], 3.61, 8.54, 5.26, 322.3, 21.9]) if "from its level" in d] == []


def test_a_level_near_zero_has_none_a_fold_measures():
    assert _details([1e-4, 2e-4, 1.5e-4, 1e-4, 3e-4, 0.01, 0.02, 0.05, 0.03, 0.04]) == []


def test_a_signed_loss_is_never_blown_up_from_its_level():
    assert _details([-0.1, 0.2, 0.25, 0.3, 0.2, 5.0, 6.0, 7.0, 8.0, 9.0]) == []


def test_a_critic_whose_return_is_better_than_at_its_first_evaluation_is_held_back():
    events = [evaluation(0, {"val_return": 10.0}, higher_is_better={"val_return": True})]
    events += _run([*LEVEL, 3.61, 8.54, 5.26, 322.3, 21.9])
    events.insert(6, evaluation(5, {"val_return": 200.0}, higher_is_better={"val_return": True}))
    assert [f for f in replay(events) if "from its level" in f.detail] == []


# -- jumped by orders of magnitude at one log --------------------------------------------------------------------------

PFNL = [0.0130, 0.0137, 0.0111, 0.0109, 0.0148, 0.0140, 0.0087, 0.0104, 0.0096, 0.0168]


def test_ten_thousand_times_every_loss_before_at_one_log_is_a_jump():
    found = replay(_run([*PFNL, 1508190.375]))
    assert len(found) == 1 and "jumped by orders of magnitude" in found[0].detail


@pytest.mark.parametrize("losses", [
    [*PFNL, 0.0168 * 9000],  # under ten thousand times the highest before: a spike until it holds
    [0.0130, 0.0137, 0.0111, 0.0109, 1508190.375],  # 4 logs before: no level yet
    [*PFNL[:5], 0.0009, *PFNL[5:], 1508190.375],  # a loss before it near zero: no level a fold measures
], ids=["9000x", "4-logs-before", "near-zero-before"])
def test_a_jump_under_ten_thousand_times_or_without_a_level_stays_quiet(losses):
    assert [d for d in _details(losses) if "jumped" in d] == []


def test_a_signed_loss_never_jumps():
    assert [d for d in _details([-0.01, *PFNL, 1508190.375]) if "jumped" in d] == []
