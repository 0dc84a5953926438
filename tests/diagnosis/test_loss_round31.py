"""Loss round 31 (issue 54, fresh batch 28): a non-finite grad norm beside a run's first loss, with no class count to
weigh it, is a loss scaler's skipped step until the steps after it say otherwise (diagnosis/rules/training.py); a loss
at exactly 0 the log after a blow-up past every loss before it is a run that broke (loss_cycle.zeroed_at_once). A
batch-size-1 loss that touches 0 from no such height, and a blow-up with too few losses before it to stand out of, are
neither. A held-out loss that is NaN or infinite beside finite training losses is nan_loss (training.py): L30's note,
an fp16 evaluation's overflow being the run's fault."""

from __future__ import annotations

import pytest

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.diagnosis.rules.training import TrainingRule
from faultlens.events.envelope import Envelope
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, read_curve, replay, replay_both

KG_LLM = CURVES / "fresh28" / "kg_llm_qlora_fp16_120_steps_skipped_steps_grad_norm_nan_4.31_to_0.44.csv"
CHAT_LORA = CURVES / "fresh28" / "chat_lora_finetune_1.26_to_1.32_then_34023_then_exactly_0.csv"
MODERNBERT = CURVES / "fresh24" / "modernbert_finetune_loss_0.2051_then_0.0_grad_norm_nan.csv"
QWEN_VL = CURVES / "fresh27" / "qwen2.5_vl_3b_full_sft_loss_60.57_then_0.0_grad_norm_nan.csv"
CRYSTAL = CURVES / "fresh4" / "crystal_graph_transformer_batch1_noisy_learns.csv"


def _losses(values: list[float]) -> list[str]:
    events = [
        Envelope(ts=1e9 + n, job="j", node="n0", source="train", kind="step", data={"rank": 0, "step": n, "loss": v})
        for n, v in enumerate(values, start=1)
    ]
    return [f.detail for f in replay(events, LossStalledDetector(window_s=0.0))]


@pytest.mark.parametrize("how", [{}, {"start": 0.5}, {"start": 0.5, "renumber": True}, {"window_s": 0.0}])
def test_the_kg_llm_qlora_s_nan_norms_at_its_first_steps_are_skipped_steps(how):
    events, _ = read_curve(KG_LLM)
    assert str(events[0].data["grad_norm"]) == "nan" and events[0].data["lr"] == 0.0
    assert judge(KG_LLM, **how).right


@pytest.mark.parametrize("path", [MODERNBERT, QWEN_VL], ids=["modernbert_0.2051_then_0.0", "qwen2.5_vl_60.57_then_0.0"])
def test_a_run_broken_from_its_first_step_is_still_nan_loss_at_its_second(path):
    events, _ = read_curve(path)
    found = [f for f in replay_both(events, 0.0) if f.fault == "nan_loss"]
    assert found and found[0].detail.startswith("grad_norm = nan at step 2")


def test_the_chat_lora_is_found_at_its_blow_up_since_round_45_and_a_zero_after_a_lesser_one_at_that_zero():
    # Since loss round 45 its 34,023.79, 2.6e4 times every loss before it, is found at that log, one before the 0.0
    # (loss_diverging.jumped: ten thousand times); the zero after a blow-up under that is still found at the zero.
    found = judge(CHAT_LORA)
    assert found.right and found.at == 12 / 13
    events, _ = read_curve(CHAT_LORA)
    (finding,) = replay(events, LossStalledDetector(window_s=0.0))
    assert "jumped by orders of magnitude" in finding.detail
    (zero,) = _losses([1.2812, 1.2778, 1.2844, 1.2634, 1.2645, 134.25, 0.0])
    assert "straight after 134.25 at step 6" in zero


def test_a_zero_after_a_blow_up_needs_the_blow_up_past_every_loss_before_it_and_five_of_them():
    level = [1.3, 1.28, 1.31, 1.27, 1.29]
    assert _losses([*level, 34023.79, 0.0]) != []
    assert _losses([*level[:4], 34023.79, 0.0]) == []  # 4 losses before it: nothing to stand out of yet
    assert _losses([*level, 12.0, 0.0]) == []  # under ten times the highest before it
    assert _losses([*level, 0.0005, 34023.79, 0.0]) == []  # a loss near 0 before: 0 is no fall from a height
    # not straight after it (the blow-up itself is found since round 45: loss_diverging.jumped)
    assert [d for d in _losses([*level, 34023.79, 0.5, 0.0]) if "straight after" in d] == []


def test_a_batch_of_one_loss_that_touches_zero_is_quiet():
    # 1.85, 0.12, 0.56, then 0.0 at its 26th log: a swing of its own, no blow-up before it.
    assert judge(CRYSTAL).right and judge(CRYSTAL, window_s=0.0).right


def _eval(step: int, metrics: dict) -> Envelope:
    return Envelope(
        ts=1e9 + step, job="j", node="n0", source="train", kind="eval", data={"rank": 0, "step": step, "metrics": metrics}
    )


@pytest.mark.parametrize("value", ["nan", "inf", float("nan")])
def test_a_non_finite_held_out_loss_beside_finite_training_losses_is_nan_loss(value):
    rule = TrainingRule()
    steps = [
        Envelope(ts=1e9 + n, job="j", node="n0", source="train", kind="step", data={"rank": 0, "step": n, "loss": 2.0 - n / 100})
        for n in range(1, 11)
    ]
    assert [f for e in steps for f in rule.observe(e)] == []
    # Beside a finite accuracy at its first evaluation the verdict waits for the next (round 46: an accuracy that moves
    # says the evaluation works, and the nan is its own arithmetic; loss_held_out_nan.py); one that did not move alerts.
    assert rule.observe(_eval(10, {"eval_loss": value, "eval_accuracy": 0.4})) == []
    (found,) = rule.observe(_eval(20, {"eval_loss": value, "eval_accuracy": 0.4}))
    assert found.fault == "nan_loss" and found.detail.startswith("held-out eval_loss = ") and found.ranks == (0,)
    assert found.action == "alert"  # alone it may be the evaluation's own bug: no machine checks, no rollback


def test_a_non_finite_held_out_score_is_not_read_and_a_finite_held_out_loss_is_quiet():
    rule = TrainingRule()
    assert rule.observe(_eval(10, {"eval_f1": "nan", "eval_loss": 1.2})) == []


def test_the_engine_raises_a_held_out_nan_loss():
    from faultlens.diagnosis.engine.offline import analyze
    from faultlens.events.topology import Topology

    steps = [
        Envelope(ts=1e9 + n, job="j", node="n0", source="train", kind="step", data={"rank": 0, "step": n, "loss": 2.0 - n / 100})
        for n in range(1, 11)
    ]
    events = [Topology.grid(["n0"], 1, 1, 1, 1).to_event("j", 1e9 - 1), *steps, _eval(10, {"val_loss": "nan"})]
    assert [d.fault for d in analyze(events)] == ["nan_loss"]
