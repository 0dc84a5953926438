"""The stalled-loss detector's divergence verdict on constructed curves: a loss that climbs steadily
through a window, by much, to above where it was first seen is flagged (rollback when a checkpoint
predates the climb); a step up that comes back down, a fine-tune near zero creeping up, a surrogate
objective and a spike stay quiet. The real curves (a DeepLab run first seen where it diverges, GAN
losses, warm-ups) are replayed in test_loss_stalled_curves.py."""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.diagnosis.rules.loss_trend import mann_kendall_z
from tests.diagnosis.test_loss_stalled import checkpoint, step

MID = 5000  # first seen mid-run: what it learned before is unseen


def _replay(losses, saved: int | None = None) -> list:
    det = LossStalledDetector()  # 10 s a step: a 120-step window
    out = []
    for k, loss in enumerate(losses):
        out += det.observe(step(MID + k, loss))
        if saved is not None and MID + k == saved:
            out += det.observe(checkpoint(saved))
    return out


def _wobble(k: int) -> float:
    return 0.08 * math.sin(1.7 * k) + 0.05 * math.sin(0.37 * k)


def test_mann_kendall_z_is_positive_for_a_climb_negative_for_a_fall_and_zero_for_a_constant():
    assert mann_kendall_z([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]) > 3.5
    assert mann_kendall_z([10, 9, 8, 7, 6, 5, 4, 3, 2, 1]) < -3.5
    assert mann_kendall_z([2.0] * 10) == 0.0


def test_a_loss_climbing_steadily_above_where_it_was_first_seen_is_diverging():
    losses = [2.0 + _wobble(k) for k in range(150)] + [2.0 + 0.01 * k + _wobble(k) for k in range(150)]
    found = _replay(losses)
    assert [f.fault for f in found] == ["loss_stalled"]
    assert "diverging" in found[0].detail and found[0].action == "alert"
    # Found while climbing, not after the fact: within the climb's first window.
    assert int(found[0].detail.rsplit("step ", 1)[1].rstrip(")")) < MID + 150 + 120


def test_a_checkpoint_saved_before_the_climb_makes_it_a_rollback():
    losses = [2.0 + _wobble(k) for k in range(150)] + [2.0 + 0.01 * k + _wobble(k) for k in range(150)]
    found = _replay(losses, saved=MID + 100)
    assert found and found[0].action == "rollback" and f"checkpoint at step {MID + 100}" in found[0].detail


def test_a_step_up_that_comes_back_down_is_no_divergence():
    # A switch to harder data (or a bad shard): the loss jumps 60 % and the run learns it again.
    losses = [2.0 + _wobble(k) for k in range(150)]
    losses += [2.0 + 1.2 * math.exp(-k / 100) + _wobble(k) for k in range(300)]
    assert _replay(losses) == []


def test_a_climb_back_from_a_low_that_stays_below_where_the_run_began_is_no_divergence():
    # A GAN discriminator's loss: 3.0 untrained, 0.5 while the generator is noise, then back up as it
    # fights back. (A run watched from its start that loses what it learned is the regression's.)
    losses = [3.0 - 2.5 * k / 150 + _wobble(k) / 10 for k in range(150)]
    losses += [0.5 + 0.005 * k + _wobble(k) / 10 for k in range(150)]
    assert _replay(losses) == []


def test_a_fine_tune_near_zero_creeping_up_rises_under_a_hundredth_of_a_nat():
    # First seen at 2e-3 with no class count: nothing says what its scale is but its own values.
    losses = [2e-3 - 1e-3 * k / 150 for k in range(150)]
    losses += [1e-3 + 2e-5 * k for k in range(300)]  # 1e-3 -> 7e-3, steadily
    assert _replay(losses) == []


def test_a_surrogate_objective_that_has_gone_below_zero_never_diverges():
    losses = [0.05 - 0.08 * k / 150 for k in range(150)] + [-0.03 + 0.005 * k for k in range(300)]
    assert _replay(losses) == []


def test_spikes_on_a_flat_loss_make_no_climb():
    losses = [2.0 + _wobble(k) + (6.0 if k % 37 == 0 else 0.0) for k in range(450)]
    assert _replay(losses) == []


def test_a_loss_swinging_between_levels_without_a_trend_is_no_climb():
    # Its later half sits a half above its earlier half, but the window began high: no steady climb.
    losses = [2.0 + _wobble(k) for k in range(150)]
    losses += [3.5 + _wobble(k) for k in range(25)] + [2.0 + _wobble(k) for k in range(35)]
    losses += [3.0 + _wobble(k) for k in range(120)]
    assert _replay(losses) == []


def test_a_climb_small_beside_the_peaks_the_run_has_shown_is_no_divergence():
    # A GAN generator's loss: 30 once at its start, then 2.0, then up half again: under a tenth of 30.
    losses = [2.0, 30.0] + [2.0 + _wobble(k) for k in range(150)] + [2.0 + 0.015 * k + _wobble(k) for k in range(100)]
    assert _replay(losses) == []


def test_a_step_up_that_holds_is_a_switch_not_a_climb():
    # A curriculum's next stage or a new data mix: the loss steps up 40 % at once and stays there.
    losses = [2.0 + _wobble(k) for k in range(150)] + [2.8 + _wobble(k) for k in range(300)]
    assert _replay(losses) == []


def test_a_slow_drift_up_of_a_tenth_of_the_level_a_window_is_no_divergence():
    losses = [2.0 + _wobble(k) for k in range(150)] + [2.0 + 0.006 * k + _wobble(k) for k in range(200)]
    assert _replay(losses) == []


def test_a_rise_inside_loud_batch_to_batch_noise_is_no_steady_climb():
    # A GAN's or an RL loss: the level edges up under swings of +-1.3 from one batch to the next.
    losses = [2.0 + 10 * _wobble(k) for k in range(150)] + [2.0 + 0.008 * k + 10 * _wobble(k) for k in range(120)]
    assert _replay(losses) == []


def test_a_climb_to_below_a_level_the_run_has_come_back_from_is_no_divergence():
    # First seen mid-way at 2.0, the run has shown 3.6 (a hard stretch of data) and come back; a climb
    # through one window from 2.0 to 3.4 is its own range again (issue 54, fresh batch 5: a per-batch
    # loss first seen mid-way climbing through one epoch to 0.039, after epochs at 0.045).
    shown = [2.0 + _wobble(k) for k in range(150)] + [3.6 + _wobble(k) for k in range(200)]
    shown += [2.0 + _wobble(k) for k in range(200)]
    assert _replay(shown + [2.0 + 0.012 * k + _wobble(k) for k in range(120)] + [3.44 + _wobble(k) for k in range(60)]) == []
    # Past it, it is diverging.
    found = _replay(shown + [2.0 + 0.02 * k + _wobble(k) for k in range(150)])
    assert [f.fault for f in found] == ["loss_stalled"] and "diverging" in found[0].detail


def test_a_noisy_loss_that_dips_and_comes_back_near_its_first_is_no_divergence():
    # Flat around its first 2.0, it dips to 1.2 and climbs back to 2.4 through a window: a climb of half
    # its level, to above the 2.0 it was first seen at (one batch's loss) but short of a quarter above it
    # (issue 54, fresh batch 10: a GPT-2 fine-tune's per-batch loss back at 2.59 against its first 2.37).
    # Climbing on past a quarter above it, it is diverging.
    dip = [2.0 + _wobble(k) for k in range(150)] + [1.2 + _wobble(k) for k in range(150)]
    assert _replay(dip + [1.2 + 0.01 * k + _wobble(k) for k in range(120)]) == []
    found = _replay(dip + [1.2 + 0.02 * k + _wobble(k) for k in range(150)])
    assert [f.fault for f in found] == ["loss_stalled"] and "diverging" in found[0].detail
