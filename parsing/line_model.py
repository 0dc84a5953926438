"""The learned fallback: a text model that names the fault class of an alarming line no rule and
no subsystem took (the mission's "rules plus ML").

Character n-grams (3-5, within words) and word n-grams (1-2) of the line with its clock, numbers,
addresses and paths masked, a linear classifier (a linear SVM, balanced classes) and
sigmoid-calibrated probabilities. The classes are the fault classes of the corpus plus
``healthy``: a line the model reads as healthy, or as a fault with less than :data:`THRESHOLD`
confidence, stays unrecognised (counted and shown, never dropped).

What the model alone finds is a suspicion: the parsers emit it as ``suspect_line`` with action
``alert`` (diagnosis/rules/catalogue.py keeps it there), never an eviction.

scikit-learn is imported only here, and this module only when a parser first needs the model
(the trainer hooks never do). The shipped model is ``line_model.pkl.gz`` next to this file;
``faultlens train-line-model`` retrains it from tests/fixtures/log_corpus and the tables' examples.
"""

from __future__ import annotations

import gzip
import json
import logging
import pickle
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

from faultlens.parsing.timestamps import split_timestamp

log = logging.getLogger(__name__)

SHIPPED = Path(__file__).resolve().parent / "line_model.pkl.gz"
HEALTHY = "healthy"
# Below this calibrated probability the model's class is not worth an alert.
THRESHOLD = 0.6

_MASKS = (
    (re.compile(r"0x[0-9a-fA-F]+"), " HEX "),
    (re.compile(r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b|\b[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b"), " PCI "),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), " IP "),
    (re.compile(r"(?:/[\w.\-]+){2,}"), " PATH "),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F\-]{27}\b"), " UUID "),
    (re.compile(r"\d+"), "0"),
)
_PREFIX = re.compile(r"^(?:\d{1,6}: |\[(?:rank|default)\d+\]:\s?)")


def normalise(line: str) -> str:
    """The line as the model reads it: no clock, no rank prefix, numbers and addresses masked."""
    text = _PREFIX.sub("", line.strip())
    text = split_timestamp(text).message
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return text[:512]


@dataclass(frozen=True)
class Guess:
    fault: str
    confidence: float


class LineModel:
    """A trained pipeline and its classes; :meth:`guess` is all the parsers call.

    scikit-learn's predict_proba costs ~10 ms a line (input checks, sparse matrices, the feature
    union); :class:`_Scorer` computes the same probabilities from the fitted parts with a few dict
    lookups and one small matrix product (tests/parsing/test_line_model.py holds them equal), and
    a line template seen again (numbers masked) is answered from a cache.
    """

    def __init__(self, pipeline: Any, meta: dict[str, Any]):
        self.pipeline = pipeline
        self.meta = meta
        self.classes = tuple(str(c) for c in pipeline.classes_)
        self._scorer = _Scorer(pipeline)
        self.proba = lru_cache(maxsize=4096)(self._scorer.proba)

    def guess(self, line: str, source: str = "kernel") -> Guess | None:
        """The fault class of ``line`` when the model is confident it is a fault, else None."""
        probs = self.proba(f"{source} {normalise(line)}")
        best = int(probs.argmax())
        fault = self.classes[best]
        if fault == HEALTHY or probs[best] < THRESHOLD:
            return None
        return Guess(fault, round(float(probs[best]), 3))


class _Scorer:
    """predict_proba of the fitted pipeline (TF-IDF union -> LinearSVC -> per-class sigmoid, then
    normalised, as sklearn's _CalibratedClassifier does) for one text, without sklearn's overhead."""

    def __init__(self, pipeline: Any):
        import numpy

        self.np = numpy
        features = pipeline.named_steps["features"]
        calibrated = pipeline.named_steps["classifier"].calibrated_classifiers_[0]
        svc = calibrated.estimator
        coef = numpy.asarray(svc.coef_, dtype=numpy.float64)
        self.intercept = numpy.asarray(svc.intercept_, dtype=numpy.float64)
        self.parts = []
        start = 0
        for _, vec in features.transformer_list:
            n = len(vec.vocabulary_)
            self.parts.append((vec.build_analyzer(), vec.vocabulary_, numpy.asarray(vec.idf_, dtype=numpy.float64),
                               coef[:, start:start + n].T.copy(), bool(vec.sublinear_tf)))  # fmt: skip
            start += n
        self.a = numpy.array([c.a_ for c in calibrated.calibrators], dtype=numpy.float64)
        self.b = numpy.array([c.b_ for c in calibrated.calibrators], dtype=numpy.float64)
        # Calibrators follow the SVC's classes; probabilities are laid out in the pipeline's.
        order = list(pipeline.classes_)
        self.slots = numpy.array([order.index(c) for c in svc.classes_])
        self.n = len(order)

    def proba(self, text: str) -> Any:
        np = self.np
        decision = self.intercept.copy()
        for analyzer, vocab, idf, weights, sublinear in self.parts:
            counts: dict[int, int] = {}
            for gram in analyzer(text):
                j = vocab.get(gram)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
            if not counts:
                continue
            idx = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
            tf = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
            values = (np.log(tf) + 1.0 if sublinear else tf) * idf[idx]
            norm = float(np.sqrt(values @ values))
            if norm:
                decision += (values / norm) @ weights[idx]
        per_class = 1.0 / (1.0 + np.exp(self.a * decision + self.b))
        proba = np.zeros(self.n)
        proba[self.slots] = per_class
        total = proba.sum()
        return proba / total if total else np.full(self.n, 1.0 / self.n)


def train(samples: Sequence[tuple[str, str, str]], *, seed: int = 0) -> LineModel:
    """A model from (source, line, class) samples; ``class`` a fault class or ``healthy``."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import FeatureUnion, Pipeline
    from sklearn.svm import LinearSVC

    # A class seen once cannot be calibrated (nor learned): left out, its line stays to the rules.
    counts0: dict[str, int] = {}
    for _, _, label in samples:
        counts0[label] = counts0.get(label, 0) + 1
    samples = [s for s in samples if counts0[s[2]] >= 2]
    texts = [f"{source} {normalise(line)}" for source, line, _ in samples]
    labels = [label for _, _, label in samples]
    features = FeatureUnion([
        ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), min_df=2, max_features=12000, sublinear_tf=True, dtype=_float32())),
        ("words", TfidfVectorizer(analyzer="word", ngram_range=(1, 2), token_pattern=r"[A-Za-z_][A-Za-z_\-]+", min_df=1, max_features=6000,
                                  sublinear_tf=True, lowercase=True, dtype=_float32())),
    ])  # fmt: skip
    # A linear SVM (a tenth of logistic regression's fit time here) with sigmoid (Platt) calibration
    # fitted on held-out folds: the probabilities the threshold reads are calibrated.
    linear = LinearSVC(C=1.0, class_weight="balanced", random_state=seed)
    smallest = min(labels.count(c) for c in set(labels))
    classifier = CalibratedClassifierCV(linear, method="sigmoid", cv=min(3, smallest), ensemble=False)
    pipeline = Pipeline([("features", features), ("classifier", classifier)])
    pipeline.fit(texts, labels)
    counts = {c: labels.count(c) for c in sorted(set(labels))}
    return LineModel(pipeline, {"samples": len(samples), "classes": counts, "sklearn": _sklearn_version(), "calibrated": "sigmoid"})


def _float32() -> Any:
    import numpy

    return numpy.float32


def _sklearn_version() -> str:
    import sklearn

    return str(sklearn.__version__)


def save(model: LineModel, path: Path = SHIPPED) -> None:
    # Plain pickle (C unpickler) in gzip: joblib's pure-Python unpickler took seconds to load it.
    path.write_bytes(gzip.compress(pickle.dumps({"pipeline": model.pipeline, "meta": model.meta}, protocol=5), compresslevel=9, mtime=0))


def load(path: Path = SHIPPED) -> LineModel | None:
    """The model in ``path``; None (logged) when it is missing or was saved by another scikit-learn."""
    try:
        blob = pickle.loads(gzip.decompress(path.read_bytes()))  # our own file, shipped in the package
        model = LineModel(blob["pipeline"], blob["meta"])
    except Exception as exc:  # a missing file, no scikit-learn, a pickle of another version: no fallback, not a crash
        log.warning("line model %s not loaded (%s): lines no rule takes stay unrecognised", path, exc)
        return None
    if model.meta.get("sklearn") != _sklearn_version():
        log.warning("line model %s was trained with scikit-learn %s, this is %s: retrain it (faultlens train-line-model)",
                    path, model.meta.get("sklearn"), _sklearn_version())
    return model


# The model the parsers use: the shipped one, loaded at first need; a bench swaps in its own.
_override: list[LineModel | None] = []


@lru_cache(maxsize=1)
def _shipped() -> LineModel | None:
    return load(SHIPPED)


def current() -> LineModel | None:
    return _override[-1] if _override else _shipped()


class using:
    """``with using(model):`` the parsers consult ``model`` (None: no model) instead of the shipped one."""

    def __init__(self, model: LineModel | None):
        self.model = model

    def __enter__(self) -> LineModel | None:
        _override.append(self.model)
        return self.model

    def __exit__(self, *exc: Any) -> None:
        _override.pop()


# -- training data ----------------------------------------------------------------------------------
def corpus_samples(rows: Iterable[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(source, line, class) of corpus rows: a fault row's lines carry its class, a healthy row's
    ``healthy``; rows that name no class (Xid-only rows) are left out."""
    out = []
    for row in rows:
        label = HEALTHY if row.get("healthy") else row.get("fault")
        if not label:
            continue
        lines = row.get("lines") or [row.get("line", "")]
        out.append((row.get("source", "kernel"), " ".join(lines), label))
    return out


def table_samples() -> list[tuple[str, str, str, str]]:
    """(source, line, class, provenance) of the shipped tables' examples: each catalogue rule's
    real example lines with the rule's class, each benign entry's example as healthy."""
    from faultlens.parsing import benign, rules

    out = [(r.source if r.source != "any" else "kernel", e.line, r.fault, e.provenance) for r in rules.shipped() for e in r.examples if e.line]
    for source in ("kernel", "nccl"):
        out.extend((source, p.example, HEALTHY, p.provenance) for p in benign.for_source(source).patterns if p.example and p.source == source)
    return out


def describe(model: LineModel) -> str:
    return json.dumps(model.meta, sort_keys=True)
