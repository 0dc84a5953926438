"""The optional learning rate of a training step (``lr``, docs/events.md): what the hooks send, how it
reads, and what it tells the stalled-loss detector: a loss that rises when the schedule raises the
learning rate (a warm restart) is no regression; one that rises while it falls still is."""

from __future__ import annotations

import json
import math

import pytest

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope, InvalidEvent, decode
from faultlens.events.payloads import check_payload, typed
from faultlens.events.payloads_job import TrainStep
from faultlens.events.step_reading import decode_train_message
from faultlens.trainer_hooks.callback_support import optimizer_lr
from faultlens.trainer_hooks.hook import TrainerHook
from tests.helpers.sent_events import SentEvents

CYCLE = 600  # steps of one cosine cycle


def restart_lr(i: int) -> float:
    """Cosine from 1e-4 to 2.4e-6 over each cycle, restarting at its peak (SGDR; LocalRetro's schedule)."""
    t = (i % CYCLE) / CYCLE
    return 2.4e-6 + (1e-4 - 2.4e-6) * 0.5 * (1 + math.cos(math.pi * t))


def restart_loss(i: int) -> float:
    """A run near its floor whose loss follows the schedule: low at each cycle's end, about twice that
    for the first half of the next cycle (LocalRetro: 0.010 at a cycle's end, 0.021 after the restart),
    with a per-batch loss's noise (each batch 0.4-1.6x the level)."""
    floor = 0.01 + 0.02 * math.exp(-i / 300)
    batch = 0.4 + 1.2 * ((math.sin(i * 12.9898) * 43758.5453) % 1.0)
    return floor * (1 + 1.1 * restart_lr(i) / 1e-4) * batch


def _replay(losses, lrs=None, first: int = 1, n: int = 3000) -> list:
    det = LossStalledDetector()
    found = []
    for i in range(first, first + n):
        data = {"rank": 0, "step": i, "loss": losses(i)}
        if lrs is not None:
            data["lr"] = lrs(i)
        found += det.observe(Envelope(ts=1.7e9 + 10.0 * i, job="j", node="n0", source="train", kind="step", data=data))
    return found


def test_a_warm_restart_that_raises_the_loss_is_no_regression_when_the_step_says_its_learning_rate():
    # Seen from a cycle's middle (a resumed run): the loss it has come down to doubles at each
    # restart and stays up for half a cycle. Without the learning rate that reads as coming apart.
    without = _replay(restart_loss, first=900)
    assert without and {f.fault for f in without} == {"loss_stalled"} and "diverging" in without[0].detail
    assert _replay(restart_loss, restart_lr, first=900) == []


def test_a_climb_through_a_slow_warm_up_still_diverges():
    # A warm-up to a rate too high: the loss climbs steadily while the rate rises by under a quarter
    # across half a window (a restart multiplies it 40-fold at once).
    def warmup_lr(i: int) -> float:
        return 1e-3 * min(1.0, i / 3000)

    def climbing(i: int) -> float:
        return 2.0 + 3.0 * math.exp(-i / 100) + (0.02 * (i - 1000) if i > 1000 else 0.0) + 0.01 * math.sin(i)

    found = _replay(climbing, warmup_lr)
    assert found and "diverging" in found[0].detail


def test_a_loss_that_rises_while_the_learning_rate_falls_is_still_a_regression():
    def decaying_lr(i: int) -> float:
        return 1e-4 * (1 - i / 4000)

    def regressed(i: int) -> float:
        return 2.0 + 4.0 * math.exp(-i / 60) + 0.01 * math.sin(i) + (1.5 if i > 1500 else 0.0)

    found = _replay(regressed, decaying_lr)
    assert [f.fault for f in found] == ["loss_stalled"] and "stays above" in found[0].detail


def _raw(**data) -> bytes:
    return json.dumps(
        {
            "v": 1,
            "id": "s1",
            "ts": 1.79e9,
            "job": "j",
            "node": "n0",
            "source": "train",
            "kind": "step",
            "data": {"rank": 0, "step": 5, "loss": 2.5, **data},
        }
    ).encode()


def test_lr_reads_alike_by_the_typed_read_and_the_general_one_and_a_bad_one_is_refused_alike():
    for read in (decode_train_message, decode):
        event = read(_raw(lr=3e-4))
        check_payload(event)
        assert typed(event, TrainStep).lr == 3e-4
        assert typed(read(_raw()), TrainStep).lr is None  # an old event without it reads as before
    for bad in (-1e-3, "fast", [1e-4]):
        verdicts = []
        for read in (decode_train_message, decode):
            try:
                check_payload(read(_raw(lr=bad)))
                verdicts.append("ok")
            except InvalidEvent as exc:
                verdicts.append(str(exc))
        assert verdicts[0] == verdicts[1] != "ok", bad


def test_the_hook_sends_a_finite_learning_rate_and_nothing_else():
    sent = SentEvents()
    hook = TrainerHook(job="j", rank=0, node="n0", settings=None, listen=False, producer=sent, flight_recorder=False)
    for lr in (2e-4, None, float("nan"), float("inf"), -1.0, 0.0):
        hook.step(loss=1.0, lr=lr)
    assert [e.data.get("lr", "absent") for e in sent.events] == [2e-4, "absent", "absent", "absent", "absent", 0.0]
    for e in sent.events:
        check_payload(e)


def test_optimizer_lr_reads_what_the_scheduler_wrote():
    torch = pytest.importorskip("torch")
    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=4)
    seen = []
    for _ in range(6):
        seen.append(optimizer_lr(optimizer))
        optimizer.step()
        scheduler.step()
    assert seen[0] == pytest.approx(0.1) and seen[2] == pytest.approx(0.05) and seen[4] == pytest.approx(0.1)
    assert optimizer_lr(None) is None and optimizer_lr(object()) is None
