"""The Hugging Face callback's gradient norm under an fp16 loss scaler (trainer_hooks/hf_grad_scaler.py), with torch's
own GradScaler on CPU stepping a real optimizer (the Trainer runs a scaler on GPUs only; Accelerate's optimizer
carries it as ``scaler``, as the stand-in holder here does): a scaled overflow the scaler skips sends no norm, a
norm under a scale below 1 is the model's, and a finite norm is the unscaled one."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from faultlens.trainer_hooks.hf_grad_scaler import ScaledNorm
from tests.trainer_hooks.torch_lazy import needs_torch

if TYPE_CHECKING:
    import torch

# torch when a test runs, not when a worker collects the file (tests/trainer_hooks/torch_lazy.py).
pytestmark = needs_torch


def grad_scaler(**kwargs) -> torch.amp.GradScaler:
    import torch

    return torch.amp.GradScaler("cpu", **kwargs)


def one_step(scaler: torch.amp.GradScaler, times: float) -> tuple[float | None, float]:
    """A step of a linear model whose loss is multiplied by ``times``: the norm the callback would send, and the
    norm of the unscaled gradient (computed apart)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    (model(x).pow(2).mean() * times).backward()
    true = float(torch.nn.utils.get_total_norm([p.grad.double() for p in model.parameters()]))
    optimizer.zero_grad()
    scaler.scale(model(x).pow(2).mean() * times).backward()
    scaled = float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]))
    watch = ScaledNorm()
    norm = watch.unscaled(scaled, SimpleNamespace(scaler=scaler))  # before the optimizer step, as the Trainer calls it
    scaler.step(optimizer)
    scaler.update()
    return watch.model_norm(norm), true


def test_a_finite_norm_is_the_unscaled_gradients():
    sent, true = one_step(grad_scaler(init_scale=2.0**16), 1.0)
    assert sent == pytest.approx(true, rel=1e-5)


def test_an_overflow_the_scaler_skips_sends_no_norm():
    held = grad_scaler(init_scale=2.0**16)
    sent, true = one_step(held, 1e35)  # finite unscaled, inf once scaled by 2**16
    assert math.isfinite(true) and sent is None
    assert held.get_scale() == 2.0**15  # the scaler skipped the step and halved its scale


def test_a_norm_past_a_collapsed_scale_is_the_models():
    held = grad_scaler(init_scale=0.5)
    sent, _ = one_step(held, float("nan"))  # every step overflowed: the scale is under 1, the gradient itself is NaN
    assert sent is not None and math.isnan(sent)
    assert held.get_scale() == 0.25


def test_without_a_scaler_the_norm_is_as_read():
    sent, true = one_step(grad_scaler(enabled=False), float("inf"))
    assert sent is not None and not math.isfinite(sent) and not math.isfinite(true)
