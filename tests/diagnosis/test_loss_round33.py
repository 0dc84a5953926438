"""Loss round 33 (issue 54, fresh batch 30): a climb whose loss is lower at each of its latest 5 logs than at the one
before is a spike the run is coming back from, not a divergence (loss_diverging.diverging): fresh batch 30's second
wav2vec2 fine-tune, 883 up to 2,397 then down at every log to 1,475, is quiet first seen halfway; the same project's
first run, climbing back to 8,166-8,629 and holding there, is still found diverging from its middle."""

from __future__ import annotations

import pytest

from tests.diagnosis.test_loss_round31 import _losses
from tests.diagnosis.test_loss_stalled_curves import CURVES, judge

RECOVERS = CURVES / "fresh30" / "wav2vec2_xlsr_ctc_finetune_second_run_11383_to_883_spike_to_2397_recovers_to_1061.csv"
COLLAPSED = CURVES / "fresh30" / "wav2vec2_xlsr_ctc_finetune_learned_to_2114_then_collapsed_to_8600_cer_1.0_lr_3e-4.csv"
LEVEL = [1000.0 + 30.0 * (-1) ** n for n in range(12)]
CLIMB = [1100.0, 1300.0, 1500.0, 1700.0, 1900.0, 2100.0, 2300.0, 2400.0]


@pytest.mark.parametrize(
    "how", [{"start": 0.5}, {"start": 0.5, "renumber": True}, {"start": 0.5, "renumber": True, "window_s": 0.0}]
)
def test_the_spike_the_wav2vec2_run_came_back_from_is_no_divergence_and_the_collapse_still_is(how):
    assert judge(RECOVERS, **how).right
    assert judge(COLLAPSED, **how).right


def test_a_climb_held_at_its_top_diverges_and_one_falling_at_each_of_its_latest_5_logs_does_not():
    held = _losses([*LEVEL, *CLIMB, 2390.0, 2410.0, 2395.0, 2405.0, 2400.0])
    assert held and "diverging" in held[0]
    assert not [d for d in _losses([*LEVEL, *CLIMB, 2200.0, 2000.0, 1800.0, 1600.0, 1400.0]) if "diverging" in d]
