"""What the run itself says of a loss curve's shape (issue 54, fresh batch 15; diagnosis/rules/loss_stalled.py,
loss_eval.py): an evaluated metric at its best yet during a loss's climb (an RL critic's loss growing with the
return), a training loss that has fitted its data beside one held-out evaluation at chance (a model answering
one class), and a fine-tune's start, which "learned a little, then stopped" does not measure from."""

from __future__ import annotations

import math

from faultlens.diagnosis.rules.loss_stalled import LossStalledDetector
from faultlens.events.envelope import Envelope

T0 = 1.7e9


def noise(i: int) -> float:
    """A deterministic wiggle in [-1, 1): a curve's batch-to-batch noise."""
    return 2 * ((math.sin(i * 12.9898) * 43758.5453) % 1.0) - 1


def step(i: int, loss: float, **more) -> Envelope:
    data = {"rank": 0, "step": i, "loss": loss, **more}
    return Envelope(ts=T0 + 10.0 * i, job="j", node="n0", source="train", kind="step", data=data)


def evaluation(i: int, metrics: dict, **more) -> Envelope:
    data = {"rank": 0, "step": i, "metrics": metrics, **more}
    return Envelope(ts=T0 + 10.0 * i + 1, job="j", node="n0", source="train", kind="eval", data=data)


def replay(events: list[Envelope]) -> list:
    det = LossStalledDetector(0.0)
    return [f for e in events for f in det.observe(e)]


def critic(returns) -> list[Envelope]:
    """A TD loss climbing from 100 to 10,000 over 120 epochs (25 % noise), one evaluation of the agent's
    return after each; ``returns(e)`` its return at epoch ``e``, higher is better by the trainer's word."""
    events = []
    for e in range(120):
        events.append(step(e, 100 * 100 ** (e / 120) * (1 + 0.25 * noise(e))))
        events.append(evaluation(e, {"return": returns(e)}, higher_is_better={"return": True}))
    return events


def test_a_critic_loss_climbing_while_the_return_reaches_new_bests_is_quiet():
    # The DDPG critic's shape: the return climbs from -900 (noisy), dipping now and then.
    assert replay(critic(lambda e: -900 + 60 * e + 300 * noise(e + 7))) == []


def test_a_critic_loss_climbing_while_the_return_never_betters_its_start_is_diverging():
    # The Rainbow DQN's shape: the return wanders below its first (-16), worse towards the end.
    found = replay(critic(lambda e: -16 - 0.8 * e - 10 * abs(noise(e + 7))))
    assert found and "diverging" in found[0].detail
    # Without any evaluation it is judged as before: diverging.
    assert "diverging" in replay([e for e in critic(lambda e: 0.0) if e.kind == "step"])[0].detail


def one_class(accuracy: float, final: float = 0.0011) -> list[Envelope]:
    """A binary fine-tune's training loss falling smoothly from 0.125 to ``final`` over 31 logs, one each 50
    steps, then its one evaluation, after the epoch (the bert-tiny read from an unshuffled file)."""
    events = [step(49 + 50 * k, 0.125 * (final / 0.125) ** (k / 30), classes=2, from_scratch=False) for k in range(31)]
    events.append(
        evaluation(1562, {"val_loss": 3.416, "val_accuracy": accuracy}, chance={"val_loss": math.log(2), "val_accuracy": 0.5})
    )
    return events


def test_one_evaluation_at_chance_beside_a_training_loss_that_fitted_its_data_is_found():
    events = one_class(0.5)
    found = replay(events)
    # At the evaluation itself, the only one: five would never come.
    assert len(found) == 1 and "held-out" in found[0].detail and found[0].ts == events[-1].ts


def test_one_evaluation_that_left_chance_or_a_training_loss_not_yet_fitted_waits():
    assert replay(one_class(0.86)) == []  # it generalises: over-fitting at worst
    assert replay(one_class(0.5, final=0.3)) == []  # still near chance in training: a warm-up, five to wait


def fine_tune(**said) -> list[Envelope]:
    """A per-step loss 1.8 at its first step, about 1.5 (8 % noise) from the 10th, falling 0.01 per 100
    steps, over 600 steps (fresh batch 15's medalpaca: LLaMA-13B fine-tuned, 32,001 tokens)."""

    def loss(i: int) -> float:
        return 1.795 if i == 1 else (1.5 - 1e-4 * i) * (1 + 0.08 * noise(i))

    return [step(i, loss(i), **said) for i in range(1, 601)]


def test_learned_a_little_then_stopped_is_not_measured_from_a_trained_model_s_first_loss():
    # Far under a guess's, ln 32001 = 10.4: a trained model's first loss, whether the trainer says so or not.
    assert replay(fine_tune(classes=32001, from_scratch=False)) == []
    assert replay(fine_tune(classes=32001)) == []
    # The same shape from random weights, by the trainer's word, is the plateau form's; so is a resumed
    # run's with no class count to say where a guess is (fresh batch 13's latent MAE, stalled).
    for said in ({"classes": 32001, "from_scratch": True}, {"from_scratch": False}, {}):
        found = replay(fine_tune(**said))
        assert found and "learned a little, then stopped" in found[0].detail, said
