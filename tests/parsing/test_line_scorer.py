"""The line model scored from its fitted numbers in plain Python (parsing/line_scorer.py, issue 58):
the same n-grams as scikit-learn's analyzers, the same probabilities as its predict_proba, and on an
install without numpy and scikit-learn the very same numbers as with them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from faultlens.parsing import line_corpus, line_model
from faultlens.parsing.line_scorer import char_wb_ngrams, word_ngrams
from tests.layout import ROOT


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Every corpus line as the model reads it, each distinct text once: a quarter of the corpus's
    texts repeat another's (same source, same line once normalised), and a text is scored alike
    wherever it stands."""
    return list(dict.fromkeys(f"{s.source} {line_model.normalise(s.line)}" for s in line_corpus.samples()))


@pytest.fixture(scope="module")
def trained(texts):
    return line_corpus.train(line_corpus.samples())


def test_the_ngrams_are_sklearns(trained, texts):
    vectorizers = dict(trained.pipeline.named_steps["features"].transformer_list)
    chars, words = vectorizers["chars"], vectorizers["words"]
    import re

    pattern = re.compile(words.token_pattern)
    for text in texts:
        assert char_wb_ngrams(text.lower(), 3, 5) == chars.build_analyzer()(text)
        assert word_ngrams(pattern.findall(text.lower()), 1, 2) == words.build_analyzer()(text)


def test_the_probabilities_are_sklearns_and_so_are_the_guesses(trained, texts):
    expected = trained.pipeline.predict_proba(texts)
    for text, want in zip(texts, expected, strict=True):
        got = trained.proba(text)
        assert got == pytest.approx(list(want), abs=1e-6)
        assert max(range(len(got)), key=got.__getitem__) == int(want.argmax())


def test_the_shipped_file_needs_neither_numpy_nor_sklearn_and_scores_the_same(texts, tmp_path):
    """A fresh interpreter that cannot import numpy or scikit-learn (as on the light install) loads
    the shipped model and gives every corpus line the same probabilities, to the last digit."""
    model = line_model.current()
    assert model is not None
    sample = texts[::7]
    (tmp_path / "texts.json").write_text(json.dumps(sample))
    probe = (
        "import importlib.abc, json, sys\n"
        "class Refuse(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('numpy', 'sklearn', 'scipy'):\n"
        "            raise ImportError(f'{name} refused: the light install has none')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "from faultlens.parsing import line_model\n"
        "m = line_model.current()\n"
        f"texts = json.load(open({str(tmp_path / 'texts.json')!r}))\n"
        "print(json.dumps([[repr(p) for p in m.proba(t)] for t in texts]))\n"
        "print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] in ('numpy', 'sklearn', 'scipy'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    light, imported = (json.loads(x) for x in out.stdout.strip().splitlines()[-2:])
    assert imported == []
    assert light == [[repr(p) for p in model.proba(t)] for t in sample]


def test_a_model_file_holding_anything_but_builtins_is_refused(tmp_path):
    import gzip
    import pickle

    path = tmp_path / "evil.pkl.gz"
    path.write_bytes(gzip.compress(pickle.dumps({"format": line_model.FORMAT, "model": subprocess.Popen, "meta": {}})))
    assert line_model.load(path) is None
