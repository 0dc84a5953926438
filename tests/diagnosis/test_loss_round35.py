"""Loss round 35 (issue 54, fresh batch 32): a trained model at a uniform guess's loss, the same to every digit printed
at 3 logs in a row while each says a learning rate above zero and none above the one before (the optimizer steps at or
past its peak rate), has lost what it knew (loss_cycle.printed_frozen, loss_cycle._stepping): fresh batch 32's DPO stage
at 0.6931 = ln 2 for its 4 quoted logs and fresh batch 23's Llama DPO at 0.6932 for its 3, while fresh batch 23's healthy
fp16 DPO LoRA, at ln 2 for its first 4 logs while its warm-up raises the rate from 0, stays quiet."""

from __future__ import annotations

import pytest

from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import replay, step

STALLED = [CURVES / "fresh32" / "llms_tool_dpo_loss_0.6931_rewards_zero_accuracy_zero_first_4_logs.csv",
           CURVES / "fresh23" / "llama_lora_sft_dpo_rewards_zero_loss_0.6932_ln2.csv"]
WARMING_UP = CURVES / "fresh23" / "qwen2.5_0.5b_instruct_dpo_lora_t4_fp16_75_steps_from_ln2_with_skipped_steps.csv"


@pytest.mark.parametrize("path", STALLED, ids=lambda p: p.name[:40])
def test_a_dpo_at_ln_2_to_every_digit_at_a_falling_rate_is_found_at_its_third_log(path):
    outcome = judge(path)
    assert outcome.right and outcome.faults == ("loss_stalled",)


@pytest.mark.parametrize("how", [{}, {"start": 0.5}, {"start": 0.5, "renumber": True}, {"window_s": 0.0}])
def test_a_dpo_at_ln_2_while_its_warm_up_raises_the_rate_from_zero_stays_quiet(how):
    assert judge(WARMING_UP, **how).right


def _at_guess(rates, **said) -> list:
    return replay([step(i, 0.6931, classes=2, **({"lr": r} if r is not None else {}), **said)
                   for i, r in enumerate(rates, 1)])


def test_three_logs_at_a_guess_from_a_trained_model_need_a_rate_above_zero_not_rising():
    found = _at_guess([1e-5, 1e-5, 9.9e-6], from_scratch=False)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "at every digit printed for 3 logs (steps 1-3), a uniform guess's ln(2) from a trained model" in found[0].detail
    assert _at_guess([0.0, 0.0, 0.0], from_scratch=False) == []  # nothing moves the weights: no update yet
    assert _at_guess([0.0, 2.5e-6, 5e-6], from_scratch=False) == []  # a warm-up's first steps barely move them
    assert _at_guess([None, None, None], from_scratch=False) == []  # no rate said: the 5 logs of printed_frozen
    assert _at_guess([1e-5, 1e-5, 9.9e-6], from_scratch=True) == []  # random weights at chance: the window's to judge
    assert _at_guess([1e-5, 1e-5, 9.9e-6]) == []  # nor where the start is unsaid


def test_three_logs_alike_away_from_a_guess_are_still_too_few():
    # A bf16 loss printed at its grain repeats on a plateau at a falling rate (fresh batch 25's mini-Phi-3 pretraining,
    # 4.225 at 4 logs in a row): only a uniform guess's loss is read at 3.
    events = [step(i, 4.225, classes=32000, lr=2e-5 - 1e-7 * i, from_scratch=False) for i in range(1, 5)]
    assert replay(events) == []
