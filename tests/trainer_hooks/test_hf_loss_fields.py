"""What the Hugging Face callback says of a run's loss on every step, without a broker: how many classes
the loss is over (trainer_hooks.hf.loss_classes) and whether the weights began random
(trainer_hooks.hf.began_from_scratch), on tiny models built from configs (no download)."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed (pip install 'faultlens[hf]')"
)


@pytest.fixture(scope="module")
def tf():
    import transformers

    return transformers


@pytest.fixture(scope="module")
def hf():
    from faultlens.trainer_hooks import hf

    return hf


def _bert(tf, **config):
    return tf.BertConfig(
        vocab_size=50,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
        max_position_embeddings=16,
        **config,
    )


def test_a_language_model_s_loss_is_over_its_vocabulary_and_a_classifier_s_over_its_labels(tf, hf):
    gpt = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=64, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    assert hf.loss_classes(gpt) == 64
    # A sequence classifier's config carries the encoder's vocabulary too: its loss is over its 3 labels.
    assert hf.loss_classes(tf.BertForSequenceClassification(_bert(tf, num_labels=3))) == 3
    assert hf.loss_classes(tf.BertForTokenClassification(_bert(tf, num_labels=5))) == 5
    # A regression head (one label) and a multi-label one (binary cross-entropy per label) have no guess
    # at ln(num_labels); nor does a multiple-choice head, whose choices are the batch's.
    assert hf.loss_classes(tf.BertForSequenceClassification(_bert(tf, num_labels=1))) is None
    multi = _bert(tf, num_labels=4, problem_type="multi_label_classification")
    assert hf.loss_classes(tf.BertForSequenceClassification(multi)) is None
    assert hf.loss_classes(tf.BertForMultipleChoice(_bert(tf))) is None
    assert hf.loss_classes(object()) is None


def test_a_model_built_from_a_config_began_from_scratch_and_a_pretrained_one_is_not_said(tf, hf):
    gpt = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=64, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    assert gpt.name_or_path == "" and hf.began_from_scratch(gpt, None) is True
    # from_pretrained records where the weights came from: a fine-tune, or a checkpoint resumed by hand.
    gpt.config.name_or_path = "gpt2"
    loaded = tf.GPT2LMHeadModel(gpt.config)
    assert loaded.name_or_path == "gpt2" and hf.began_from_scratch(loaded, None) is None
    # The user's word stands, and a module that is no Hugging Face model says nothing.
    assert hf.began_from_scratch(gpt, False) is False and hf.began_from_scratch(loaded, True) is True
    import torch

    assert hf.began_from_scratch(torch.nn.Linear(2, 2), None) is None


class _Table:
    """What the callback reads of a `datasets` table (not installed here): its column names and a column."""

    def __init__(self, **columns):
        self.column_names = list(columns)
        self._columns = columns

    def __getitem__(self, name):
        return self._columns[name]


def test_a_single_label_classifier_s_prior_is_read_from_its_training_labels(tf, hf):
    import math

    import torch

    classifier = tf.BertForSequenceClassification(_bert(tf, num_labels=3))
    labels = [0] * 6 + [1] * 3 + [2]
    loader = torch.utils.data.DataLoader(_Table(input_ids=[[1, 2]] * 10, labels=labels))
    expected = -sum(n / 10 * math.log(n / 10) for n in (6, 3, 1))
    assert hf.train_label_prior(classifier, loader) == pytest.approx(expected)
    # The column as the dataset names it before the Trainer's collator renames it.
    assert hf.train_label_prior(classifier, torch.utils.data.DataLoader(_Table(label=labels))) == pytest.approx(expected)
    # A language model's tokens, a regression head's targets, a table without labels, a plain torch
    # Dataset (its items would be loaded one by one): no prior.
    gpt = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=64, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    assert hf.train_label_prior(gpt, loader) is None
    regression = tf.BertForSequenceClassification(_bert(tf, num_labels=1))
    assert hf.train_label_prior(regression, torch.utils.data.DataLoader(_Table(labels=[0.5, 1.5]))) is None
    assert hf.train_label_prior(classifier, torch.utils.data.DataLoader(_Table(input_ids=[[1]]))) is None
    assert hf.train_label_prior(classifier, torch.utils.data.DataLoader(torch.arange(4))) is None
    assert hf.train_label_prior(classifier, None) is None
