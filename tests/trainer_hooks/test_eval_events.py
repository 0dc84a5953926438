"""Held-out evaluations (``train``/``eval``) sent by the framework callbacks from real tiny runs on CPU,
on the embedded broker: Lightning's validation at each epoch's end (never its sanity check) and the
Hugging Face Trainer's evaluation every few steps, each metric with its chance from the class count, so
diagnosis/rules/loss_eval.py can tell a run whose held-out metric stays at chance."""

from __future__ import annotations

import importlib.util
import math
import uuid

import pytest

from tests.trainer_hooks.callback_script import KEY, records

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(
        importlib.util.find_spec("lightning") is None or importlib.util.find_spec("transformers") is None,
        reason="needs Lightning and transformers (pip install 'faultlens[lightning,hf]')",
    ),
]


@pytest.fixture(scope="module")
def parts():
    from tests.trainer_hooks import eval_parts

    return eval_parts


@pytest.fixture
def job():
    return f"eval-{uuid.uuid4().hex[:8]}"


def evaluations(settings, job: str, count: int) -> list[dict]:
    return [e.data for e in records(settings, "telemetry.train", job, "eval", lambda found: len(found) >= count)]


def test_lightning_sends_each_validation_with_its_chance(parts, kafka_settings, job, tmp_path):
    faultlens = parts.LightningCallback(
        job=job, node="n001", settings=kafka_settings, keys=KEY.verify_keys(), state_dir=tmp_path / "state", classes=2
    )
    model = parts.Guesser()
    parts.lightning_trainer(tmp_path, faultlens, epochs=3).fit(model, parts.loader(0), parts.loader(1))

    sent = evaluations(kafka_settings, job, 3)
    batches = parts.SAMPLES // parts.BATCH
    # One per epoch, after its last step; the sanity check's two batches before training are not one.
    assert [e["step"] for e in sent] == [batches, 2 * batches, 3 * batches]
    assert [e["metrics"] for e in sent] == [pytest.approx(v) for v in model.validated]
    assert all(e["chance"] == {"val_loss": pytest.approx(math.log(2)), "val_acc": 0.5} and e["rank"] == 0 for e in sent)


def test_the_hf_trainer_sends_each_evaluation_s_loss_and_accuracy_with_their_chance(parts, kafka_settings, job, tmp_path):
    faultlens = parts.HfCallback(
        job=job, node="n001", settings=kafka_settings, keys=KEY.verify_keys(), state_dir=tmp_path / "state", parallel_groups=False
    )
    trainer = parts.hf_trainer(tmp_path, faultlens, steps=6, every=2)
    trainer.train()

    sent = evaluations(kafka_settings, job, 3)
    logged = [h for h in trainer.state.log_history if "eval_loss" in h]
    assert [e["step"] for e in sent] == [h["step"] for h in logged] == [2, 4, 6]
    # The Trainer's own figures; its runtime and throughput are no held-out metric.
    assert [e["metrics"] for e in sent] == [
        pytest.approx({"eval_loss": h["eval_loss"], "eval_accuracy": h["eval_accuracy"]}) for h in logged
    ]
    # A two-label head: a guess's loss is ln 2, its accuracy a coin's (no datasets table to read the labels from).
    assert all(e["chance"] == {"eval_loss": pytest.approx(math.log(2)), "eval_accuracy": 0.5} for e in sent)
