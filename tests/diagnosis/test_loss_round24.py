"""Loss round 24 (issue 54, fresh batch 21): a held-out accuracy the same to every digit at each of the first five
evaluations of a run watched from an untrained model is a model answering alike for every input
(loss_eval_unchanged.py), while one that moved first, a fine-tune's and a perfect one stay quiet; and a gradient that
has come back from zero needs zeros for a whole window (loss_gradient.py): a GRPO policy's passing zeros stay quiet,
a gradient that dies for good after them is found a window late."""

from __future__ import annotations

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, read_curve
from tests.diagnosis.test_loss_what_the_run_says import evaluation, noise, replay, step

FRESH21 = CURVES / "fresh21"
VGG19_PRIOR = FRESH21 / "vgg19_from_scratch_3way_unbalanced_at_class_prior_10_epochs.csv"
GRPO = FRESH21 / "llada_8b_remasking_policy_grpo_loss_zero_reward_rising.csv"
THIRD = {"val_accuracy": 1 / 3, "val_loss": 1.0986}


def _epochs(shares: list[float], from_scratch: bool = True, loss: float = 0.66, moving: float = 0.02) -> list:
    """A 3-way classifier's epochs: a flat training loss, then its held-out accuracy ``shares``, one an epoch, beside
    a held-out loss about ``loss`` moving by ``moving`` of it."""
    events = []
    for i, share in enumerate(shares, start=1):
        events.append(step(i, loss * (1 + 0.01 * noise(i)), classes=3, from_scratch=from_scratch))
        metrics = {"val_accuracy": share, "val_loss": round(loss * (1 + moving * noise(100 + i)), 4)}
        events.append(evaluation(i, metrics, chance=THIRD))
    return events


def test_vgg19_answering_castle_for_every_image_is_found_at_its_fifth_evaluation():
    # val_accuracy 0.7294 (248 of 340, the castles) at all 10 epochs; loss 0.66-0.68, val_loss 0.66-0.70.
    events, _ = read_curve(VGG19_PRIOR)
    found = replay(events)  # under the shortest window, as every replay here
    assert [f.fault for f in found] == ["loss_stalled"] and found[0].action == "alert"
    assert "val_accuracy 0.7294 the same to every digit at each of its first 5 evaluations (steps 1-5)" in found[0].detail
    assert judge(VGG19_PRIOR).right


def test_a_share_unchanged_beside_a_moving_held_out_loss_is_found_and_one_beside_a_loss_repeated_too_is_not():
    found = replay(_epochs([0.7294] * 10))
    assert [f.fault for f in found] == ["loss_stalled"] and "(steps 1-5)" in found[0].detail
    # Every metric the same at every evaluation: one evaluation logged again, nothing said of the model's outputs.
    assert replay(_epochs([0.7294] * 10, moving=0.0)) == []


def test_a_share_that_moved_before_it_stayed_is_quiet():
    # fresh13's gesture ConvLSTM: 0.1875 twice, up it goes, then 13 of 16 at 20 evaluations in a row.
    assert replay(_epochs([0.1875, 0.1875, 0.3125, 0.5, 0.6875, *[0.8125] * 20])) == []


def test_an_unchanged_share_of_a_fine_tune_or_a_perfect_one_is_quiet():
    assert replay(_epochs([0.7294] * 10, from_scratch=False, loss=0.05)) == []
    assert replay(_epochs([1.0] * 10)) == []


def test_four_alike_are_not_yet_five():
    assert replay(_epochs([0.7294] * 4 + [0.7324])) == []


def test_a_grpo_policy_whose_gradient_is_zero_off_and_on_is_quiet_under_the_shortest_window():
    # grad norm 0.0 at 164 of 1,000 steps, in runs of 2 to 6, its reward rising (eighth-medians 0.125 to 0.31).
    for how in ({"window_s": 0.0}, {"start": 0.5, "renumber": True, "window_s": 0.0}):
        assert judge(GRPO, **how).right, how


def _grads(norms: list[float]) -> list:
    return [step(i, 2.0 * (1 + 0.05 * noise(i)), grad_norm=g) for i, g in enumerate(norms, start=1)]


def test_a_gradient_that_came_back_from_zero_is_found_only_after_a_whole_window_of_zeros():
    moving = [0.1 * (1 + 0.2 * noise(i)) for i in range(30)]
    passing = [*moving, 0.0, 0.0, *moving, *[0.0] * 6, *moving]
    assert replay(_grads(passing)) == []
    found = replay(_grads([*passing, *[0.0] * 25]))
    assert [f.fault for f in found] == ["loss_stalled"] and "for 20 steps since step 99" in found[0].detail


def test_a_gradient_that_never_came_back_is_found_at_its_fifth_zero_as_before():
    found = replay(_grads([*[0.1 * (1 + 0.2 * noise(i)) for i in range(30)], *[0.0] * 6]))
    assert [f.fault for f in found] == ["loss_stalled"] and "for 5 steps since step 31" in found[0].detail
