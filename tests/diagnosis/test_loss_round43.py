"""Loss round 43 (issue 54, fresh batch 40): two general readings the batch's stalled curves lacked.

* A loss at a framework's softmax ceiling at 2 logs straight after one under a hundredth of it: from fitting its
  batches to every sample wrong in one log's steps (loss_saturated.saturated; a Caffe run at 6.0e-5, then 87.3365 at
  iterations 20,480 and 20,500).
* An ROC AUC is read against its chance, a coin's 0.5, class count or not, where it is a fraction
  (payloads_job.area_under_roc, callback_support.eval_chance; a click model at ln 2 with AUC 0.500000 every epoch).

Each is written here as a curve; the near misses beside each stay quiet."""

from __future__ import annotations

import pytest

from faultlens.events.payloads_job import TrainEval, area_under_roc
from faultlens.trainer_hooks.callback_support import eval_chance
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge
from tests.diagnosis.test_loss_what_the_run_says import evaluation, replay, step

FRESH40 = CURVES / "fresh40"
FOUND = [
    "caffe_cuda8_issue_loss_2.0e-4_1.6e-4_6.0e-5_then_87.3365_at_iterations_20480_and_20500.csv",
    "pnn2_product_nets_issue_loss_0.693614_creeping_to_0.693158_at_ln2_auc_0.500000_every_epoch.csv",
]


@pytest.mark.parametrize("how", [{}, {"window_s": 0.0}], ids=["own-window", "shortest-window"])
@pytest.mark.parametrize("name", FOUND)
def test_the_two_fresh40_stalls_are_found(name, how):
    outcome = judge(FRESH40 / name, **how)
    assert outcome.right and outcome.faults == ("loss_stalled",)


# -- a jump to the softmax ceiling from a fitted loss ------------------------------------------------------------------

@pytest.mark.parametrize("before, ceiling", [(6.01552e-05, 87.3365), (0.02, 16.1181)])
def test_a_jump_to_the_ceiling_from_a_fitted_loss_is_found_at_its_second_log(before, ceiling):
    events = [step(20420, 2.0e-4), step(20440, before), step(20460, ceiling), step(20480, ceiling)]
    found = replay(events)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "straight after" in found[0].detail and "20460-20480" in found[0].detail


@pytest.mark.parametrize("losses", [
    [2.0e-4, 6.0e-5, 87.3365],  # one log at the ceiling: a single batch's
    [2.0e-4, 87.3365, 6.0e-5, 87.3365],  # back down between: no two in a row
    [11.2306, 87.3365, 87.3365],  # from an untrained loss: saturated wants its 3 logs
    [0.9, 87.3365, 87.3365],  # over a hundredth of the ceiling before: not yet fitted
    [6.0e-5, 87.34, 87.34],  # printed coarsely: any loss near there
])
def test_near_misses_of_a_jump_to_the_ceiling_stay_quiet(losses):
    assert replay([step(100 * (i + 1), loss) for i, loss in enumerate(losses)]) == []


# -- an ROC AUC against a coin ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, auc", [
    ("val_auc", True), ("eval_roc_auc", True), ("auroc", True), ("val_AUC", True),
    ("val_pr_auc", False), ("val_prauc", False), ("val_cauchy", False), ("val_aucpr", False),
])
def test_an_roc_auc_is_known_by_its_name_as_a_whole_word(name, auc):
    assert area_under_roc(name) is auc
    assert TrainEval.direction(name) is (True if auc else None)


def test_an_auc_has_a_coins_chance_whatever_the_class_count_where_it_is_a_fraction():
    assert eval_chance({"val_auc": 0.5}, None, None, None) == {"val_auc": 0.5}
    assert eval_chance({"val_auc": 0.8, "val_loss": 0.6}, 2, None, None)["val_auc"] == 0.5
    assert eval_chance({"val_auc": 48.7}, None, None, None) == {}  # in per cent: not read against 0.5


def _click_model(aucs: list[float]) -> list:
    events = []
    for i, auc in enumerate(aucs):
        events += [step(i, 0.6936 - 1e-5 * i), evaluation(i, {"val_auc": auc}, chance={"val_auc": 0.5})]
    return events


def test_a_held_out_auc_at_a_coins_five_evaluations_is_found():
    found = replay(_click_model([0.5] * 5))
    assert [f.fault for f in found] == ["loss_stalled"] and "val_auc" in found[0].detail


@pytest.mark.parametrize("aucs", [
    [0.5] * 4,  # four evaluations
    [0.5, 0.5, 0.62, 0.5, 0.5],  # left chance once among them
])
def test_near_misses_of_an_auc_at_chance_stay_quiet(aucs):
    assert replay(_click_model(aucs)) == []
