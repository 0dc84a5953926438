"""Loss round 32 (issue 54, fresh batch 29): 5 logs in a row each ten times every loss the run showed before them is
a run blown up that has not come back (loss_diverging.blown_up), found with no window filled: fresh batch 29's Faster
R-CNN climbing to 2.5e22, fresh batch 5's Keras MLP held at 26.6. A spike that comes back within 5 logs, a blow-up
under tenfold, a loss first seen near zero and a signed loss are not it."""

from __future__ import annotations

import pytest

from tests.diagnosis.test_loss_round31 import _losses
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge

FASTER_RCNN = CURVES / "fresh29" / "tf_object_detection_faster_rcnn_resnet101_loss_0.06_then_5.4e19_climbing_to_2.5e22.csv"
KERAS_MLP = CURVES / "fresh5" / "keras_mlp_blows_up_at_epoch_10_then_frozen.csv"


@pytest.mark.parametrize("path", [FASTER_RCNN, KERAS_MLP], ids=["faster_rcnn_to_2.5e22", "keras_mlp_held_at_26.6"])
def test_a_run_blown_up_tenfold_for_5_logs_is_found_at_the_5th(path):
    outcome = judge(path)
    assert outcome.right and outcome.at == 1.0


def test_the_finding_says_how_far_above_every_loss_before():
    (detail,) = _losses([0.0630, 0.1628, 0.0577, 5.4059e19, 4.3254e20, 2.1069e21, 7.7742e21, 2.5263e22])
    assert detail.startswith("loss 5.406e+19 or more at each of the latest 5 logs (steps 4-8), 3.32e+20x every loss")


@pytest.mark.parametrize(
    "values",
    [
        [0.06, 0.16, 0.06, 5e19, 4e20, 2e21, 8e21, 0.07, 0.06],  # a spike that came back at its 5th log
        [0.06, 0.16, 0.06, 1.5, 3.0, 6.0, 12.0, 24.0],  # its first blown-up log under ten times the losses before
        [1e-7, 1e-7, 0.13, 0.69, 0.22, 0.0061, 0.0028],  # first seen near zero: no level to measure tenfold from
        [-0.06, 0.16, 0.06, 5e19, 4e20, 2e21, 8e21, 3e22],  # a signed loss: a surrogate's, no floor
    ],
    ids=["spike-came-back", "under-tenfold", "from-near-zero", "signed"],
)
def test_what_is_not_a_blow_up_that_stayed(values):
    assert not [d for d in _losses(values) if "blown up" in d]
