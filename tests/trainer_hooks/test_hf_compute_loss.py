"""The Hugging Face callback's step loss where the model's forward carries none: a Trainer whose
``compute_loss`` calls the model without labels and makes the loss from its logits (TRL's DPO, KTO and
reward trainers do). Real Trainer runs on CPU (a tiny GPT-2 built from a config), the hook sending to a
stand-in producer (no broker): the steps the Trainer logs carry its logged loss with the steps it
averages (an epoch's log too), a run whose forward carries its loss is sent as before, a NaN the Trainer's
NaN filter hides from its log is still found (by the gradient), and a DPO or reward model's steps state ln 2 as
their chance."""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import pytest

from tests.helpers.sent_events import SentEvents

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed (pip install 'faultlens[hf]')"
)

STEPS, LOG_EVERY = 6, 2
NAN_AT = 3  # the first step whose loss is NaN (NanFrom)


@pytest.fixture(scope="module")
def parts():
    """transformers, torch and the tiny model's parts (tests/trainer_hooks/hf_parts.py), imported when a test runs."""
    import torch
    import torch.nn.functional as F
    import transformers

    from faultlens.trainer_hooks import hf
    from tests.trainer_hooks import hf_parts

    class LossFromLogits(transformers.Trainer):
        """The model called without labels; the next-token cross-entropy made here from its logits."""

        loss_is_scaled_for_ga = False  # a per-batch mean: the Trainer divides it by the accumulation count

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            logits = model(**inputs).logits
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
            return (loss, logits) if return_outputs else loss

    class Preference(transformers.Trainer):
        """A DPO-like trainer: -log sigmoid(beta * margin) between a sequence (chosen) and its reversal
        (rejected), no reference model; logs ``rewards/margins`` as TRL's DPOTrainer.log does."""

        loss_is_scaled_for_ga = False

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.margins: list[float] = []

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            ids = inputs["input_ids"]
            both = torch.cat([ids, ids.flip(1)])
            logps = torch.log_softmax(model(input_ids=both).logits[:, :-1], -1)
            seq = logps.gather(-1, both[:, 1:, None]).squeeze(-1).sum(-1)
            margin = 0.1 * (seq[: len(ids)] - seq[len(ids) :])
            self.margins.append(float(margin.detach().mean()))
            loss = -F.logsigmoid(margin).mean()
            return (loss, None) if return_outputs else loss

        def log(self, logs, start_time=None):
            if self.margins:
                logs["rewards/margins"] = sum(self.margins) / len(self.margins)
                self.margins.clear()
            super().log(logs, start_time)

    @dataclasses.dataclass
    class DPOConfig(transformers.TrainingArguments):
        """TRL's DPOConfig as the callback reads it (its class name and ``loss_type``; TRL is not installed here)."""

        loss_type: list[str] = dataclasses.field(default_factory=lambda: ["sigmoid"])

    class NanFrom(LossFromLogits):
        """The model's outputs NaN from step ``NAN_AT`` on (as a run whose weights or activations blew up)."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            logits = model(**inputs).logits
            if self.state.global_step + 1 >= NAN_AT:
                logits = logits * float("nan")
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
            return (loss, logits) if return_outputs else loss

    class Reward(transformers.Trainer):
        """TRL's RewardTrainer's loss (trl/trainer/reward_trainer.py): a one-label head scores a sequence (chosen)
        and its reversal (rejected), -log sigmoid(r_chosen - r_rejected)."""

        loss_is_scaled_for_ga = False

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            ids = inputs["input_ids"]
            rewards = model(input_ids=torch.cat([ids, ids.flip(1)])).logits.squeeze(-1)
            chosen, rejected = rewards.chunk(2)
            loss = -F.logsigmoid(chosen - rejected).mean()
            return (loss, None) if return_outputs else loss

    @dataclasses.dataclass
    class RewardConfig(transformers.TrainingArguments):
        """TRL's RewardConfig as the callback reads it (its class name, ``center_rewards_coefficient``)."""

        center_rewards_coefficient: float | None = None

    class Pairs(hf_parts.Sequences):
        """The sequences as a `datasets` table shows itself (not installed here): by its column names."""

        column_names = ["input_ids", "attention_mask"]

    def reward_model():
        torch.manual_seed(0)
        config = transformers.GPT2Config(
            vocab_size=hf_parts.VOCAB,
            n_positions=hf_parts.SEQ,
            n_embd=32,
            n_layer=2,
            n_head=2,
            num_labels=1,
            pad_token_id=hf_parts.VOCAB - 1,
        )
        return transformers.GPT2ForSequenceClassification(config)

    class Parts:
        pass

    found = Parts()
    found.transformers, found.hf, found.data = transformers, hf, hf_parts
    found.LossFromLogits, found.Preference, found.DPOConfig = LossFromLogits, Preference, DPOConfig
    found.NanFrom, found.Reward, found.RewardConfig, found.Pairs = NanFrom, Reward, RewardConfig, Pairs
    found.reward_model = reward_model
    return found


@pytest.fixture
def sent(monkeypatch, parts):
    """What the callback's hook sends: the hook made on a stand-in producer, no listener, no broker."""
    from faultlens.trainer_hooks.hook import TrainerHook

    producer = SentEvents()

    def hook_on_stand_in(*, rank, job, checkpoint_dir, on_checkpoint, from_scratch, **_):
        return TrainerHook(
            job=job or "j",
            rank=rank,
            node="n001",
            settings=None,
            listen=False,
            producer=producer,
            flight_recorder=False,
            on_checkpoint=on_checkpoint,
            from_scratch=from_scratch,
        )

    monkeypatch.setattr(parts.hf, "make_hook", hook_on_stand_in)
    return producer


def run(parts, tmp_path, trainer_class=None, args_class=None, arguments=None, model=None, data=None, **callback):
    """A short Trainer run on CPU with the callback; ``arguments`` override TrainingArguments'. Returns the Trainer's
    logged losses by step."""
    args_class = args_class or parts.transformers.TrainingArguments
    args = args_class(
        **{"max_steps": STEPS, "logging_steps": LOG_EVERY, **(arguments or {})},
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=5e-3,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    faultlens = parts.hf.FaultlensCallback(job="j", parallel_groups=False, **callback)
    trainer = (trainer_class or parts.transformers.Trainer)(
        model=model or parts.data.tiny_gpt2(),
        args=args,
        train_dataset=data or parts.data.Sequences(64),
        callbacks=[faultlens],
    )
    trainer.train()
    logged = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    return logged


def steps_of(producer):
    return [e.data for e in producer.events if e.kind == "step"]


def test_a_loss_made_outside_the_forward_reaches_the_steps_the_trainer_logs(parts, sent, tmp_path):
    logged = run(parts, tmp_path, parts.LossFromLogits)

    published = steps_of(sent)
    assert [s["step"] for s in published] == list(range(1, STEPS + 1))
    with_loss = {s["step"]: s for s in published if s["loss"] is not None}
    # Every logged step carries the Trainer's own logged loss, the mean over the steps since its last log.
    assert sorted(with_loss) == sorted(logged) == list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))
    assert [with_loss[n]["loss"] for n in sorted(logged)] == pytest.approx([logged[n] for n in sorted(logged)])
    assert all(with_loss[n]["loss_steps"] == LOG_EVERY for n in logged)
    # A step's mean cross-entropy over 64 tokens, from a random start: near ln 64, not twice it.
    assert 0.5 * math.log(64) < with_loss[LOG_EVERY]["loss"] < 1.5 * math.log(64)
    # The loss is the user's code's, over no class count the callback knows; the other step fields as always.
    assert all("classes" not in s and "chance_loss" not in s for s in published)
    assert all(s["grad_norm"] > 0 and s["tokens"] == 4 * 2 * parts.data.SEQ for s in published)


def test_a_forward_that_carries_its_loss_is_sent_as_before(parts, sent, tmp_path):
    logged = run(parts, tmp_path)

    published = steps_of(sent)
    assert [s["step"] for s in published] == list(range(1, STEPS + 1))
    # Each step its own loss (not the Trainer's log of it, nor both): the logged loss is the mean of the steps'.
    assert all(math.isfinite(s["loss"]) and "loss_steps" not in s for s in published)
    for n in logged:
        mean = sum(s["loss"] for s in published[n - LOG_EVERY : n]) / LOG_EVERY
        assert mean == pytest.approx(logged[n], rel=1e-4)
    assert all(s["classes"] == parts.data.VOCAB for s in published)


def test_a_dpo_run_states_ln_2_as_its_chance(parts, sent, tmp_path):
    logged = run(parts, tmp_path, parts.Preference, parts.DPOConfig)

    with_loss = [s for s in steps_of(sent) if s["loss"] is not None]
    assert [s["step"] for s in with_loss] == sorted(logged)
    # The sigmoid loss at a zero margin: the loss of a policy that cannot tell the chosen answer from the rejected.
    assert all(s["chance_loss"] == pytest.approx(math.log(2)) for s in with_loss)
    assert with_loss[0]["loss"] == pytest.approx(math.log(2), rel=0.5)


def test_a_stated_chance_stands_and_another_preference_loss_states_none(parts, sent, tmp_path):
    run(parts, tmp_path, parts.Preference, parts.DPOConfig, chance_loss=0.5)
    assert {s.get("chance_loss") for s in steps_of(sent) if s["loss"] is not None} == {0.5}

    hf, dpo = parts.hf, parts.DPOConfig
    margins = {"loss": 0.6, "rewards/margins": 0.1}
    kwargs = {"output_dir": str(tmp_path / "o"), "report_to": "none", "use_cpu": True}
    assert hf.preference_chance(dpo(**kwargs), margins) == pytest.approx(math.log(2))
    # Another loss than DPO's sigmoid, several combined, one weighted, an NLL term added to it.
    assert hf.preference_chance(dpo(loss_type=["hinge"], **kwargs), margins) is None
    assert hf.preference_chance(dpo(loss_type=["sigmoid", "sft"], **kwargs), margins) is None
    assert hf.preference_chance(dpo(**kwargs), {**margins, "nll_loss": 1.0}) is None
    # No margins logged, or another trainer's arguments (KTO, CPO and ORPO log margins too).
    assert hf.preference_chance(dpo(**kwargs), {"loss": 0.6}) is None
    plain = parts.transformers.TrainingArguments(**kwargs)
    assert hf.preference_chance(plain, margins) is None


def nan_loss_findings(producer):
    """What the training rule (diagnosis/rules/training.py) finds in the steps sent: the NaN findings' details."""
    from faultlens.diagnosis.rules.training import TrainingRule

    rule = TrainingRule()
    return [f.detail for e in producer.events for f in rule.observe(e) if f.fault == "nan_loss"]


@pytest.mark.parametrize("nan_filter", [True, False])
def test_a_nan_the_trainer_filters_from_its_log_is_still_found(parts, sent, tmp_path, nan_filter):
    logged = run(parts, tmp_path, parts.NanFrom, arguments={"logging_nan_inf_filter": nan_filter})

    published = {s["step"]: s for s in steps_of(sent)}
    broken = [n for n in logged if n >= NAN_AT]  # the logged steps whose window holds a NaN step
    assert broken == [4, 6]
    if nan_filter:
        # The Trainer's log of those windows is finite (a stand-in mean, then 0.0 once every step is NaN): sent, it
        # would be a loss the run never made, so those steps carry none.
        assert all(math.isfinite(logged[n]) for n in broken)
        assert all(published[n]["loss"] is None and "loss_steps" not in published[n] for n in broken)
    else:
        assert all(published[n]["loss"] == "nan" and published[n]["loss_steps"] == LOG_EVERY for n in broken)
    # The window before carries its loss; every step from NAN_AT on its non-finite gradient, which the rule finds.
    assert math.isfinite(published[LOG_EVERY]["loss"])
    assert [n for n, s in published.items() if s["grad_norm"] == "nan"] == list(range(NAN_AT, STEPS + 1))
    found = nan_loss_findings(sent)
    assert found[0] == f"grad_norm = nan at step {NAN_AT} (rank 0 on n001)"
    assert any("loss = nan" in d for d in found) is not nan_filter


def test_an_epochs_log_reaches_its_last_step(parts, sent, tmp_path, caplog):
    # 64 sequences, 8 a step: 8 steps an epoch; the run stops 4 steps into its second epoch, which logs then too.
    with caplog.at_level("WARNING", logger="faultlens.trainer_hooks.hf"):
        logged = run(parts, tmp_path, parts.LossFromLogits, arguments={"logging_strategy": "epoch", "max_steps": 12})

    assert sorted(logged) == [8, 12]
    with_loss = {s["step"]: s for s in steps_of(sent) if s["loss"] is not None}
    assert sorted(with_loss) == [8, 12]
    assert [with_loss[n]["loss"] for n in (8, 12)] == pytest.approx([logged[8], logged[12]])
    assert [with_loss[n]["loss_steps"] for n in (8, 12)] == [8, 4]
    # Two losses over the run: too few for the stalled-loss diagnosis to judge, and the user is told.
    warned = [r.getMessage() for r in caplog.records if "logs: 2 over the run" in r.getMessage()]
    assert len(warned) == 1 and "logging_strategy=epoch" in warned[0]


def test_a_reward_model_states_ln_2_as_its_chance(parts, sent, tmp_path):
    logged = run(parts, tmp_path, parts.Reward, parts.RewardConfig, model=parts.reward_model(), data=parts.Pairs(64))

    with_loss = [s for s in steps_of(sent) if s["loss"] is not None]
    assert [s["step"] for s in with_loss] == sorted(logged)
    # Both answers scored alike: the pairwise loss of a reward model no better than a coin.
    assert all(s["chance_loss"] == pytest.approx(math.log(2)) for s in with_loss)
    assert with_loss[0]["loss"] == pytest.approx(math.log(2), rel=0.5)

    hf, config = parts.hf, parts.RewardConfig
    kwargs = {"output_dir": str(tmp_path / "o"), "report_to": "none", "use_cpu": True}
    columns = ("input_ids", "attention_mask")
    assert hf.preference_chance(config(**kwargs), {"loss": 0.6}, columns) == pytest.approx(math.log(2))
    # A margin column shifts the loss's zero; unknown columns may hold one; a centring term adds to the loss.
    assert hf.preference_chance(config(**kwargs), {"loss": 0.6}, (*columns, "margin")) is None
    assert hf.preference_chance(config(**kwargs), {"loss": 0.6}, None) is None
    assert hf.preference_chance(config(center_rewards_coefficient=0.01, **kwargs), {"loss": 0.6}, columns) is None
    plain = parts.transformers.TrainingArguments(**kwargs)
    assert hf.preference_chance(plain, {"loss": 0.6}, columns) is None


def test_the_losses_a_run_logs_are_counted(parts, tmp_path):
    from types import SimpleNamespace

    from faultlens.trainer_hooks.hf_logged_loss import logged_losses

    state = SimpleNamespace(logging_steps=500, max_steps=1000, num_train_epochs=3)
    kwargs = {"output_dir": str(tmp_path / "o"), "report_to": "none", "use_cpu": True}
    counted = {
        strategy: logged_losses(parts.transformers.TrainingArguments(logging_strategy=strategy, **kwargs), state)
        for strategy in ("steps", "epoch", "no")
    }
    # The Trainer's default 500 steps over 1,000; an epoch's log over 3; none at all (the loss never reaches faultlens).
    assert counted == {"steps": 2, "epoch": 3, "no": 0}
