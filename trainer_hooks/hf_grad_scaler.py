"""A step's gradient norm under an fp16 loss scaler (Accelerate's optimizer carries the Trainer's ``scaler``), for the
Hugging Face callback (trainer_hooks/hf.py).

The gradients are accumulated scaled, so the norm read from them is divided by the scale they were made with. A
scaled gradient that overflows is the scaler's routine: it skips that optimizer step and halves its scale (a run
starting at 2**16 overflows at its first steps until the scale fits). Sent as it is, that inf or NaN norm would be
read as a NaN of the model's (nan_loss, a stop-time diagnosis) on every fp16 run that overflows. So a non-finite
norm on a step whose scale the scaler lowered is no norm of the model's: none is sent. Once the scale is below 1
the unscaled gradient itself overflows, every step, as apex's 'reducing loss scale to 8.165126103939127e-202' says
(docs/design.md §9: nan_loss): that norm is sent as it is.
"""

from __future__ import annotations

import math
from typing import Any


class ScaledNorm:
    """The loss scaler's scale a step's gradients were made with, and what the scaler did with them."""

    def __init__(self) -> None:
        self._scaler: Any = None
        self._made_at: float | None = None

    def unscaled(self, norm: float, optimizer: Any) -> float:
        """The norm of the scaled gradients, unscaled (called before the optimizer step: the scale is still the
        one they were made with; the scaler updates it inside optimizer.step)."""
        scaler = getattr(optimizer, "scaler", None)
        if scaler is None or not scaler.is_enabled():
            self._scaler = self._made_at = None
            return norm
        self._scaler, self._made_at = scaler, float(scaler.get_scale())
        return norm / self._made_at

    def model_norm(self, norm: float | None) -> float | None:
        """The step's norm to send, after its optimizer step: None for a scaler's skipped overflow (module doc)."""
        if norm is None or math.isfinite(norm) or self._scaler is None or self._made_at is None:
            return norm
        now = float(self._scaler.get_scale())
        return None if now < self._made_at and now >= 1.0 else norm
