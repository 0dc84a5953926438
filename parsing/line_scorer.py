"""The line model's probabilities from its fitted numbers alone, in plain Python (issue 58).

The node agent runs on the light install (``pip install faultlens``: no numpy, no scikit-learn), and
its kernel and trainer parsers still consult the line model. What scoring a line needs is small and
fixed once the model is fitted: each TF-IDF part's vocabulary, idf weights, n-gram shape and
sublinear flag, the linear SVM's weights and intercepts, and the sigmoid calibrators' a and b.
:func:`export` takes them out of a fitted scikit-learn pipeline (at training time only); the shipped
file holds them as builtins (dict, list, ``array.array``), so loading it imports nothing beyond the
standard library, and :class:`PlainScorer` gives the same numbers on every install: one scorer, one
order of operations (tests/parsing/test_line_scorer.py holds it to scikit-learn's predict_proba and
to itself with numpy and scikit-learn absent).
"""

from __future__ import annotations

import math
import re
from array import array
from typing import Any

_WHITE_SPACES = re.compile(r"\s\s+")  # scikit-learn's char_wb folds runs of white space first


def export(pipeline: Any) -> dict[str, Any]:
    """The fitted numbers of a ``features`` (a FeatureUnion of TfidfVectorizers) -> calibrated
    LinearSVC pipeline, as builtins. Weights are stored feature-major (row j: class weights of
    feature j), so a line's features add whole rows."""
    features = pipeline.named_steps["features"]
    calibrated = pipeline.named_steps["classifier"].calibrated_classifiers_[0]
    svc = calibrated.estimator
    classes = [str(c) for c in pipeline.classes_]
    coef = svc.coef_
    n_classes = coef.shape[0]
    parts = []
    start = 0
    for _, vec in features.transformer_list:
        vocab = {str(g): int(j) for g, j in vec.vocabulary_.items()}
        n = len(vocab)
        weights = array("d", (float(w) for w in coef[:, start:start + n].T.ravel()))
        parts.append({"analyzer": vec.analyzer, "ngram_range": list(vec.ngram_range), "lowercase": bool(vec.lowercase),
                      "token_pattern": vec.token_pattern, "sublinear_tf": bool(vec.sublinear_tf), "vocabulary": vocab,
                      "idf": array("d", (float(x) for x in vec.idf_)), "weights": weights})  # fmt: skip
        start += n
    return {
        "classes": classes,
        # Calibrators follow the SVC's classes; probabilities are laid out in the pipeline's.
        "slots": [classes.index(str(c)) for c in svc.classes_],
        "n_svc": n_classes,
        "intercept": [float(x) for x in svc.intercept_],
        "a": [float(c.a_) for c in calibrated.calibrators],
        "b": [float(c.b_) for c in calibrated.calibrators],
        "parts": parts,
    }


def char_wb_ngrams(text: str, lo: int, hi: int) -> list[str]:
    """scikit-learn's ``char_wb`` n-grams: within each white-space-separated word padded with one
    space each side; a word shorter than n counted once."""
    grams: list[str] = []
    for word in _WHITE_SPACES.sub(" ", text).split():
        w = f" {word} "
        size = len(w)
        for n in range(lo, hi + 1):
            offset = 0
            grams.append(w[offset:offset + n])
            while offset + n < size:
                offset += 1
                grams.append(w[offset:offset + n])
            if offset == 0:
                break
    return grams


def word_ngrams(tokens: list[str], lo: int, hi: int) -> list[str]:
    """scikit-learn's word n-grams of ``tokens`` (the tokens themselves when lo is 1)."""
    if hi == 1:
        return tokens
    out = list(tokens) if lo == 1 else []
    for n in range(max(lo, 2), min(hi, len(tokens)) + 1):
        out.extend(" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    return out


class _Part:
    __slots__ = ("analyze", "vocab", "idf", "weights", "sublinear")

    def __init__(self, part: dict[str, Any]):
        lo, hi = part["ngram_range"]
        lower = part["lowercase"]
        if part["analyzer"] == "char_wb":
            self.analyze = lambda text: char_wb_ngrams(text.lower() if lower else text, lo, hi)
        elif part["analyzer"] == "word":
            tokens = re.compile(part["token_pattern"])
            self.analyze = lambda text: word_ngrams(tokens.findall(text.lower() if lower else text), lo, hi)
        else:
            raise ValueError(f"line model part: analyzer {part['analyzer']!r} is not scored here")
        self.vocab: dict[str, int] = part["vocabulary"]
        self.idf: array = part["idf"]
        self.weights: array = part["weights"]
        self.sublinear = part["sublinear_tf"]


class PlainScorer:
    """predict_proba of the exported model for one text: per part the l2-normalised (sublinear)
    TF-IDF of the line's n-grams in the vocabulary, times the SVM's weights, plus its intercepts;
    each class's sigmoid calibrator, then the probabilities normalised to sum to one, as
    scikit-learn's _CalibratedClassifier does."""

    def __init__(self, exported: dict[str, Any]):
        self.classes: tuple[str, ...] = tuple(exported["classes"])
        self.slots: list[int] = exported["slots"]
        self.n_svc: int = exported["n_svc"]
        self.intercept: list[float] = exported["intercept"]
        self.a: list[float] = exported["a"]
        self.b: list[float] = exported["b"]
        self.parts = [_Part(p) for p in exported["parts"]]

    def proba(self, text: str) -> tuple[float, ...]:
        c = self.n_svc
        decision = list(self.intercept)
        for part in self.parts:
            counts: dict[int, int] = {}
            vocab = part.vocab
            for gram in part.analyze(text):
                j = vocab.get(gram)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
            if not counts:
                continue
            idf, weights = part.idf, part.weights
            values = [((math.log(tf) + 1.0) if part.sublinear else float(tf)) * idf[j] for j, tf in counts.items()]
            norm = math.sqrt(math.fsum(v * v for v in values))
            if not norm:
                continue
            for (j, _), v in zip(counts.items(), values, strict=True):
                x = v / norm
                row = j * c
                for k in range(c):
                    decision[k] += x * weights[row + k]
        per_class = [_sigmoid(a * d + b) for a, b, d in zip(self.a, self.b, decision, strict=True)]
        proba = [0.0] * len(self.classes)
        for slot, p in zip(self.slots, per_class, strict=True):
            proba[slot] = p
        total = math.fsum(proba)
        return tuple(p / total for p in proba) if total else tuple(1.0 / len(proba) for _ in proba)


def _sigmoid(z: float) -> float:
    """1 / (1 + e^z), 0.0 where e^z overflows (numpy's inf gives the same)."""
    try:
        return 1.0 / (1.0 + math.exp(z))
    except OverflowError:
        return 0.0
