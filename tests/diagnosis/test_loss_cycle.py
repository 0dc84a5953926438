"""A loss frozen batch by batch (diagnosis/rules/loss_cycle.py): the same batches each epoch, each at its
own loss to five digits epoch after epoch, is a model whose weights no longer move, whatever its first
step was (issue 54, fresh batch 8: an EEG-to-fMRI decoder's 4 batches at 2.89e8, 2.88e8, 2.55e8, 2.11e8).
The period is found from the losses; a run learning through the same cycle, shuffled batches, a flat loss
that only wiggles at the tolerance, or a schedule decayed to nothing are not it."""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.loss_cycle import frozen_period
from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope

BATCHES = (2.89e8, 2.88e8, 2.55e8, 2.11e8)  # the decoder's batches: the first step is the highest's


def noise(i: int) -> float:
    """A deterministic wiggle in [-1, 1)."""
    return 2 * ((math.sin(i * 12.9898) * 43758.5453) % 1.0) - 1


def cycle(drift: float, jitter: float = 1e-6):
    """Each step the loss of batch ``i % 4``, moving by ``drift`` of its level each epoch."""
    return lambda i: BATCHES[i % 4] * (1 - drift * (i // 4)) * (1 + jitter * noise(i))


def replay(loss, n: int = 272, from_scratch: bool | None = True, lr=None) -> list:
    det = LossStalledDetector()
    found = []
    for i in range(n):
        data: dict = {"rank": 0, "step": i, "loss": loss(i)}
        if from_scratch is not None:
            data["from_scratch"] = from_scratch
        if lr is not None:
            data["lr"] = lr(i)
        found += det.observe(Envelope(ts=1.7e9 + 10.0 * i, job="j", node="n0", source="train", kind="step", data=data))
    return found


def test_the_period_is_found_from_the_losses():
    assert frozen_period([cycle(0.0)(i) for i in range(120)]) == 4
    # Three batches, then five: no batch index needed.
    assert frozen_period([(3.0, 2.0, 1.0)[i % 3] for i in range(60)]) == 3
    assert frozen_period([float(i % 5 + 1) for i in range(60)]) == 5


def test_no_period_where_the_batches_move_or_the_loss_is_one_flat_value():
    assert frozen_period([cycle(1e-3)(i) for i in range(120)]) is None  # learning: 0.1 % an epoch
    assert frozen_period([1.0 + 0.3 * noise(i) for i in range(120)]) is None  # shuffled batches
    assert frozen_period([5.0] * 60) is None  # one value is the flat test's
    # A flat loss that wiggles at about the tolerance fits a short period by chance; its "batches" do not
    # differ, so it is no cycle (fresh batch 7's PINN at 5.8113, 1.7e-5 of its level over 20 epochs).
    assert frozen_period([5.8113 * (1 + 1e-5 * noise(i)) for i in range(20)]) is None
    assert frozen_period([0.0, 0.0, 1e-9] * 20) is None


def test_a_model_frozen_batch_by_batch_is_stalled_though_it_sits_below_its_first_step():
    found = replay(cycle(0.0))
    assert [f.fault for f in found] == ["loss_stalled"] and found[0].action == "alert"
    assert "frozen batch by batch" in found[0].detail and "every 4 steps" in found[0].detail
    # Whatever the trainer says of its start: a frozen model is frozen, resumed or not.
    assert [f.fault for f in replay(cycle(0.0), from_scratch=None)] == ["loss_stalled"]


def test_a_run_learning_through_the_same_cycle_is_quiet():
    assert replay(cycle(1e-3)) == []


def test_a_cycle_at_the_end_of_a_decayed_schedule_is_quiet():
    # The learning rate said, and decayed to a hundredth of its peak: a converged run whose weights barely
    # move by design repeats its batches too.
    assert replay(cycle(0.0), lr=lambda i: 1e-3 if i < 40 else 1e-5) == []
