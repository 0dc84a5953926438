"""Loss round 26 (issue 54, fresh batch 23): an fp16 loss scaler's skipped step, a non-finite grad norm logged beside
the ordinary loss its forward made, is no NaN of the model's (diagnosis/rules/training.py, SCALER_SKIPS); a NaN norm
beside a loss that says the model broke (none sent, non-finite, exactly 0, blown up) still is, and so are such steps
run on past a scale halved from 2**16 to below 1."""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.training import SCALER_SKIPS, TrainingRule
from tests.diagnosis.diag_events import step
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, read_curve, replay_both

FRESH23 = CURVES / "fresh23"
DPO_FP16 = FRESH23 / "qwen2.5_0.5b_instruct_dpo_lora_t4_fp16_75_steps_from_ln2_with_skipped_steps.csv"
VG_LLM = FRESH23 / "qwen2.5_vl_7b_vgllm_finetune_loss_to_8196_grad_nan.csv"


def _faults(losses_and_norms, classes: int | None = None) -> list[tuple[int, str]]:
    rule = TrainingRule()
    out = []
    for n, (loss, norm) in enumerate(losses_and_norms, start=1):
        event = step(float(n), "n0", 0, n, loss=loss, grad_norm=norm)
        if classes is not None:
            event.data["classes"] = classes
        out += [(n, f.fault) for f in rule.observe(event)]
    return out


def test_the_fp16_dpo_run_s_four_skipped_steps_are_quiet_in_every_mode():
    events, _ = read_curve(DPO_FP16)
    assert sum(not math.isfinite(e.data["grad_norm"]) for e in events if e.data.get("grad_norm") is not None) == 4
    assert replay_both(events, 0.0) == []
    assert judge(DPO_FP16).right
    assert all(judge(DPO_FP16, start, renumber).right for start, renumber in ((0.5, False), (0.5, True)))


def test_a_nan_norm_beside_a_blown_up_loss_is_still_found_at_its_step():
    found = judge(VG_LLM)
    assert found.right and found.faults[:1] == ("nan_loss",)
    # 14.7, 14.4, then 8195.8 with a NaN norm: 560x the losses before it.
    assert _faults([(14.68, 86.9), (14.36, 90.6), (8195.77, "nan")]) == [(3, "nan_loss")]


def test_an_ordinary_loss_with_a_nan_norm_is_a_skipped_step_and_the_run_goes_on():
    assert _faults([(0.69, "nan"), (0.69, "nan"), (0.69, 15.0), (0.6, 14.0), (0.5, "nan"), (0.45, 12.0)], classes=2) == []


def test_a_nan_norm_beside_a_loss_that_says_the_model_broke_is_nan_loss():
    assert _faults([(1.9, 21.9), (0.0, "nan")]) == [(2, "nan_loss")]  # the Trainer's stand-in for a NaN window's mean
    assert _faults([(1.9, 21.9), ("nan", "nan")])[:1] == [(2, "nan_loss")]
    assert _faults([(1.9, 21.9), (None, "nan")]) == [(2, "nan_loss")]  # the HF callback sends no loss for it
    assert _faults([(-0.2, 1.0), (-0.1, "nan")]) == [(2, "nan_loss")]  # a surrogate: nothing tells its blow-up
    # A first step with no class count: nothing weighs its loss, the next step's does (loss round 31).
    assert _faults([(3.0, "nan")]) == []
    assert _faults([(3.0, "nan"), (0.0, "nan")]) == [(2, "nan_loss")]
    assert _faults([(3.0, "nan"), (16.0, "nan")]) == [(2, "nan_loss")]


def test_skips_past_a_scale_halved_to_below_1_are_nan_loss():
    ordinary = [(0.69, "nan")] * (SCALER_SKIPS + 1)
    assert _faults(ordinary, classes=2) == [(SCALER_SKIPS + 1, "nan_loss")]
    # A finite norm between ends a run of skips: each run is counted afresh.
    broken_up = [(0.69, "nan")] * SCALER_SKIPS + [(0.6, 10.0)] + [(0.6, "nan")] * SCALER_SKIPS
    assert _faults(broken_up, classes=2) == []
