"""The steps of a Hugging Face Trainer run whose loss is made outside the model's forward (TRL's DPO, KTO and
reward trainers, a user's ``compute_loss``): no forward hook reads it, so such a step waits for the Trainer's log
of it (``on_log``'s ``loss``: the mean over the steps since its last log and over the ranks). Kept apart from the
callback (trainer_hooks/hf.py) because what the log does and does not say is the Trainer's business, read from
transformers' trainer.py and trainer_callback.py:

* when a log comes: at a step end that ``DefaultFlowCallback`` marked ``should_log`` (every ``logging_steps``), or,
  under ``logging_strategy="epoch"``, after the epoch's last step has ended (``on_epoch_end`` marks it, once the
  step's ``on_step_end`` has passed: the step waits through the epoch's end for it);
* what the logged loss hides: with ``logging_nan_inf_filter`` (the default) a micro-batch's non-finite loss is
  added as the mean of the window so far, so a NaN run logs finite losses (a window's mean with a stand-in, then
  0.0 once every step is NaN). The callback cannot see the loss itself; it does see the step's gradient, non-finite
  after a non-finite loss. A window with such a step sends no loss (the stand-in is no loss the run made); the
  step's own non-finite ``grad_norm`` carries the NaN to the training rule. A loss scaler's skipped overflow (fp16)
  sends no norm (trainer_hooks/hf_grad_scaler.py): its loss was finite, nothing hidden.
"""

from __future__ import annotations

import math
from typing import Any

# The fewest losses the stalled-loss diagnosis judges a window of (diagnosis/rules/loss_stalled.py MIN_WINDOW;
# the trainer side imports nothing of diagnosis): a run logging fewer is not judged, and is told so.
LOSSES_JUDGED_LEAST = 20


def log_follows(args: Any, state: Any, control: Any) -> bool:
    """Whether the Trainer logs its loss right after this step (called at ``on_step_end``, after
    ``DefaultFlowCallback``'s, the first callback): a step marked ``should_log``, or under epoch logging the
    epoch's last step (``state.epoch`` whole: epoch + (step + 1) / steps_in_epoch) or the run's (max_steps)."""
    if control.should_log:
        return True
    if getattr(args, "logging_strategy", None) != "epoch":
        return False
    epoch = getattr(state, "epoch", None)
    return bool(control.should_training_stop) or (epoch is not None and float(epoch).is_integer())


def logged_losses(args: Any, state: Any) -> int | None:
    """How many losses the Trainer logs over the whole run (None where its length is unknown)."""
    strategy = getattr(args, "logging_strategy", None)
    if strategy == "no":
        return 0
    if strategy == "epoch":
        epochs = getattr(state, "num_train_epochs", None) or getattr(args, "num_train_epochs", None)
        return math.ceil(epochs) if epochs else None
    every, steps = getattr(state, "logging_steps", None), getattr(state, "max_steps", None)
    if strategy != "steps" or not every or not steps or steps <= 0:
        return None
    return int(steps // every)


class LoggedLoss:
    """The one step that waits for the Trainer's log of its loss, and what the window before that log showed."""

    def __init__(self) -> None:
        self.logged_at = 0  # the step of the Trainer's last logged loss
        self.unsent: dict[str, Any] | None = None
        self._broken = False  # a step since the last log whose gradient went non-finite
        self.warned = False

    def start(self, step: int) -> None:
        self.logged_at = step  # the Trainer counts its logged loss from here too

    def seen(self, step: dict[str, Any]) -> None:
        """A step without a loss of its own, as it ends (its norm none where a loss scaler skipped an overflow)."""
        norm = step.get("grad_norm")
        if norm is not None and not math.isfinite(norm):
            self._broken = True

    def hold(self, step: dict[str, Any]) -> None:
        self.unsent = step

    def take(self) -> dict[str, Any] | None:
        step, self.unsent = self.unsent, None
        return step

    def logged(self, args: Any, global_step: int, loss: Any) -> dict[str, Any]:
        """The fields a held step carries from the Trainer's log: its ``loss`` and ``loss_steps``; no loss for a
        window the NaN filter fed a stand-in (module docstring)."""
        averaged, self.logged_at = global_step - self.logged_at, global_step
        hidden, self._broken = self._broken and getattr(args, "logging_nan_inf_filter", True), False
        if hidden or not isinstance(loss, (int, float)):
            return {"loss": None}
        return {"loss": float(loss), "loss_steps": averaged}
