"""Loss round 46 (issue 54, fresh batches 44 and 45 opened): a held-out NaN that is the evaluation's, and an accuracy
far from chance beside a held-out loss at a guess's.

* A held-out loss non-finite from its FIRST evaluation, while the same evaluation's other metrics are numbers that move
  from one evaluation to the next, is the evaluation's own arithmetic (a CTC loss's inf averaged in), not the run's
  (diagnosis/rules/loss_held_out_nan.py; fresh44's Marathi ASR LoRA: val_loss nan at all three evaluations beside a
  word error rate of 0.208, 0.221, 0.211). One that was finite before, or beside nothing held out that moves (fresh44's
  text-GCN runs, their held-out accuracy the same at every epoch), alerts.
* A held-out share at least half the way from its chance to perfect is a model answering by its input, whatever the
  held-out loss beside it (loss_eval._far; fresh45's IMDB classifier over-fitting, val_loss 0.6877 against ln 2 at
  val_acc 0.8754)."""

from __future__ import annotations

import math

import pytest

from faultlens.diagnosis.rules.loss_eval import judged
from faultlens.diagnosis.rules.loss_held_out_nan import HeldOutNan
from faultlens.events.payloads_job import TrainEval
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge, replay_both
from tests.diagnosis.test_loss_what_the_run_says import evaluation, step

ASR = CURVES / "fresh44" / "marathi_asr_lora_lightning_48_rows_per_batch_loss_1.04_to_0.03_0.33_batch_1_to_4_val_loss_nan_at_3_evals_wer_0.21.csv"
TEXT_GCN = sorted((CURVES / "fresh44").glob("text_gcn_*.csv"))
IMDB = CURVES / "fresh45" / "imdb_keras_embedding_flatten_20_epochs_at_ln2_epochs_1_to_6_then_0.55_to_8.8e-5_val_acc_0.87.csv"
LLAMA = CURVES / "fresh45" / "llama_1.2b_lora_textgen_webui_first_100_logs_steps_3_to_399_loss_2.35_to_2.54_flat_grad_norm_inf_every_log.csv"
NAN = float("nan")


@pytest.mark.parametrize("how", [{}, {"start": 0.5}, {"start": 0.5, "renumber": True}, {"window_s": 0.0}])
def test_the_asr_lora_whose_held_out_loss_is_nan_from_its_first_evaluation_is_quiet(how):
    assert judge(ASR, **how).faults == ()


@pytest.mark.parametrize("path", TEXT_GCN, ids=lambda p: p.name[:20])
def test_the_text_gcn_runs_whose_held_out_accuracy_never_moves_are_still_nan_loss(path):
    assert len(TEXT_GCN) == 2
    assert judge(path).right


def test_the_llama_lora_with_an_inf_gradient_norm_at_every_log_is_nan_loss():
    outcome = judge(LLAMA)
    assert outcome.expect == "nan_loss" and outcome.right


def _nan_findings(events) -> list:
    return [f for f in replay_both(events, 0.0) if f.fault == "nan_loss"]


def _run(evals: list[dict]) -> list:
    events = []
    for i, metrics in enumerate(evals):
        events += [step(10 * i + j, 1.0 - 0.01 * (10 * i + j)) for j in range(10)]
        events.append(evaluation(10 * i + 9, metrics))
    return events


def test_a_held_out_nan_from_the_first_evaluation_beside_a_metric_that_moves_is_quiet():
    evals = [{"val_loss": NAN, "val_wer": w} for w in (0.208, 0.221, 0.211)]
    assert _nan_findings(_run(evals)) == []


def test_a_held_out_nan_from_the_first_evaluation_beside_a_frozen_metric_alerts_at_the_second():
    found = _nan_findings(_run([{"val_loss": NAN, "val_acc": 0.32117}] * 3))
    assert found and found[0].action == "alert" and "at step 19" in found[0].detail


def test_a_held_out_nan_from_the_first_evaluation_alone_alerts_at_once():
    found = _nan_findings(_run([{"val_loss": NAN}] * 2))
    assert found and "at step 9" in found[0].detail


def test_a_held_out_loss_that_was_finite_and_became_nan_alerts_though_other_metrics_move():
    evals = [{"val_loss": 0.9, "val_wer": 0.3}, {"val_loss": NAN, "val_wer": 0.25}]
    found = _nan_findings(_run(evals))
    assert found and "at step 19" in found[0].detail


def test_a_training_loss_gone_non_finite_is_nan_loss_whatever_the_held_out_metrics_do():
    events = _run([{"val_loss": NAN, "val_wer": 0.3}, {"val_loss": NAN, "val_wer": 0.25}])
    events.append(step(20, NAN))
    assert [f for f in replay_both(events, 0.0) if f.fault == "nan_loss"]


def test_the_watch_keeps_each_rank_and_job_apart():
    watch = HeldOutNan()
    assert watch.alerts("a", 0, {"val_loss": 1.0}) is None
    # job b never had a finite held-out loss: its NaN beside a first metric waits; job a's was finite, it alerts.
    assert watch.alerts("b", 0, {"val_loss": NAN, "val_wer": 0.2}) is None
    assert watch.alerts("a", 0, {"val_loss": NAN, "val_wer": 0.2}) == "val_loss"
    assert watch.alerts("a", 1, {"val_loss": math.inf}) == "val_loss"


# -- an accuracy far from chance beside a held-out loss at a guess's ----------------------------------------------------

def _at(metrics: dict[str, float]) -> dict[str, bool]:
    payload = TrainEval(rank=0, step=1, metrics=metrics, chance={"val_loss": math.log(2), "val_acc": 0.5})
    return {name: at for name, (_, _, at) in (judged(payload) or {}).items()}


def test_an_accuracy_half_the_way_to_perfect_is_not_a_guess_s_beside_a_loss_at_ln_2():
    assert _at({"val_loss": 0.6877, "val_acc": 0.8754}) == {"val_loss": True, "val_acc": False}
    assert _at({"val_loss": 0.6877, "val_acc": 0.75}) == {"val_loss": True, "val_acc": False}


def test_an_accuracy_short_of_half_the_way_beside_a_loss_at_ln_2_is_still_a_guess_at_the_prior():
    assert _at({"val_loss": 0.6877, "val_acc": 0.74}) == {"val_loss": True, "val_acc": True}
    assert _at({"val_loss": 0.6877, "val_acc": 0.65}) == {"val_loss": True, "val_acc": True}


@pytest.mark.parametrize("how", [{"start": 0.5}, {"start": 0.5, "renumber": True},
                                 {"start": 0.5, "renumber": True, "window_s": 0.0}])
def test_the_over_fitting_imdb_run_first_seen_past_its_plateau_is_quiet(how):
    # From its start it is still flagged at its 5th epoch at ln 2 (a plateau of 6 epochs at chance that ends,
    # FRESH_MISSED); its over-fitting, val_loss 0.28 to 0.75 at val_acc 0.87-0.88, is quiet.
    assert judge(IMDB, **how).faults == ()
