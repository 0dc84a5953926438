"""Loss round 23 (issue 54, fresh batch 20): a loss at exactly 0 for 5 logs straight from the level the run was at,
its last loss printed finely enough that a loss coming down would have shown on its way, scores nothing
(loss_cycle.zeroed_at_once): found at any time, while a loss that prints its way down to 0, a run whose level was
already about 0, and a surrogate loss that went below 0 stay quiet."""

from __future__ import annotations

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, read_curve, replay
from tests.diagnosis.test_loss_what_the_run_says import noise, step

MGM = CURVES / "fresh20" / "mgm_llama2_stage2_loss_0.0_from_the_second_log.csv"


def _zeros_after(head: list[float], zeros: int = 9) -> list:
    """A run's logged losses ``head`` (per log, its steps 1, 2, ...), then ``zeros`` logs at 0.0."""
    return [step(i, v) for i, v in enumerate([*head, *[0.0] * zeros], start=1)]


def test_a_loss_at_0_the_log_after_1_4138_is_found_at_its_fifth_zero():
    # Mini-Gemini stage 2 on Llama-2 (JIA-Lab-research/MGM#98, 'the loss is 0'): 1.4138, then 0.0 at 9 logs.
    events, _ = read_curve(MGM)
    found = replay(events, LossStalledDetector(window_s=0.0))
    assert [f.fault for f in found] == ["loss_stalled"] and found[0].action == "alert"
    assert "loss 0 at every digit printed for 5 logs (steps 2-6), straight from 1.4138 at step 1" in found[0].detail
    assert judge(MGM).right


def test_a_long_run_whose_loss_drops_to_0_mid_way_is_found_though_its_windows_never_judge_a_0():
    head = [2.0 * (1 + 0.05 * noise(i)) for i in range(300)]
    found = replay(_zeros_after([round(v, 4) for v in head]), LossStalledDetector())
    assert [f.fault for f in found] == ["loss_stalled"] and "straight from" in found[0].detail
    assert "at step 300" in found[0].detail and "(steps 301-305)" in found[0].detail  # the drop, at its 5th zero


def test_a_loss_printing_its_way_down_to_0_is_quiet():
    # fresh5's CLIP LoRA: 0.015, 0.0084, 0.0036, then 0.0 (a step of 1e-4 is 3 % of 0.0036: too coarse to show
    # the way down); fresh2's classifier 0.0001, then 0.0.
    assert replay(_zeros_after([0.9, 0.2, 0.015, 0.0084, 0.0036])) == []
    assert replay(_zeros_after([0.9, 0.01, 0.001, 0.0001])) == []


def test_a_run_about_0_already_is_quiet_when_one_batch_stands_out_before_its_zeros():
    # fresh5's CLIP LoRA at its 1,314th log: zeros after 0.1037, a batch among hundreds of logs at 0-1e-3.
    head = [round(0.0004 * abs(noise(i)), 4) for i in range(200)] + [0.1037]
    assert replay(_zeros_after(head)) == []


def test_a_surrogate_loss_that_went_below_0_has_no_floor_there():
    assert replay(_zeros_after([0.5, -0.2, 0.3, 0.2153])) == []


def test_fewer_than_5_zeros_are_left_to_the_window():
    # fresh1's TinyLlama: 1.8998 then 0.0 at 4 logs (with a NaN gradient: the training rule's).
    assert replay(_zeros_after([1.8998], zeros=4)) == []
