"""The stalled-loss detector's "at chance" on constructed curves (issue 54, loss round 14): a guess's
loss is ln(classes) on every batch, and a held-out metric that left chance says what the model
predicts better than a training loss that carries more than the data's (a regulariser, a KL term)."""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope

T0 = 1.7e9
LN5, LN2 = math.log(5), math.log(2)


def step(i: int, loss: float, **more) -> Envelope:
    return Envelope(
        ts=T0 + 10.0 * i, job="j", node="n0", source="train", kind="step", data={"rank": 0, "step": i, "loss": loss, **more}
    )


def evaluation(i: int, accuracy: float, loss: float) -> Envelope:
    return Envelope(
        ts=T0 + 10.0 * i + 1,
        job="j",
        node="n0",
        source="train",
        kind="eval",
        data={
            "rank": 0,
            "step": i,
            "metrics": {"val_acc": accuracy, "val_loss": loss},
            "chance": {"val_acc": 0.5, "val_loss": LN2},
        },
    )


def replay(events: list[Envelope]) -> list:
    det = LossStalledDetector(window_s=0.0)
    return [f for e in events for f in det.observe(e)]


def test_a_per_batch_loss_swinging_around_ln_k_is_no_guess_and_a_steady_one_is():
    # One batch's loss each, down from 2.8 to swing 0.5-2.7 around ln 5 (a fine-tune's new head answering
    # confidently, right on some batches and wrong on others): its median passes ln 5, a guess's is ln 5
    # on every batch.
    def level(i: int) -> float:
        return LN5 + max(0.0, 1.2 * (1 - i / 40))

    swinging = [step(i, level(i) * (1 + 0.7 * math.sin(2.3 * i)), classes=5) for i in range(1, 200)]
    assert replay(swinging) == []
    steady = [step(i, LN5 * (1 + 0.01 * math.sin(2.3 * i)), classes=5) for i in range(1, 200)]
    found = replay(steady)
    assert found and {f.fault for f in found} == {"loss_stalled"} and "at chance, ln(5)" in found[0].detail


def test_a_loss_blown_up_above_chance_is_flagged_however_it_swings():
    blown = [step(i, 3 * LN5 * (1 + 0.5 * math.sin(2.3 * i)), classes=5) for i in range(1, 60)]
    found = replay(blown)
    assert found and {f.fault for f in found} == {"loss_stalled"} and "above chance" in found[0].detail


def test_a_held_out_metric_that_left_chance_answers_for_a_training_loss_at_chance():
    # A Bayesian network's training loss (NLL plus its KL term) sits at ln 2; held out it is right 70 % of
    # the time from its first epoch. Its sibling at a coin's 0.51 held out is stalled.
    def run(accuracy: float, val_loss: float) -> list[Envelope]:
        events = []
        for i in range(1, 300):
            events.append(step(i, LN2 * (1 + 0.01 * math.sin(2.3 * i)), classes=2))
            if i % 10 == 5:  # an evaluation each epoch, the first before a window is judged
                events.append(evaluation(i, accuracy, val_loss))
        return events

    assert replay(run(0.70, 0.56)) == []
    found = replay(run(0.51, 0.693))
    assert found and {f.fault for f in found} == {"loss_stalled"}
    # The training loss alone, with no evaluation to answer for it, is at chance.
    alone = replay([e for e in run(0.70, 0.56) if e.kind == "step"])
    assert alone and {f.fault for f in alone} == {"loss_stalled"} and "at chance, ln(2)" in alone[0].detail
