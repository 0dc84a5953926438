"""Retrain the line model as a past commit could have, for tools/fallback_backtest.py's ``--models``.

    python -m tools.fallback_retrain OUT COMMIT[:N] [COMMIT[:N] ...] [--recipe base|words|faultweight]

For each COMMIT, in a ``git worktree add --detach`` of it (removed after), that commit's own
``line_corpus.samples()`` (its corpus, its OPENED_BATCHES, its tables' examples: never a later batch)
trains a model by RECIPE, and its exported numbers (``line_scorer.export``) are pickled to
``OUT/<commit8>_<recipe>.pkl``. ``COMMIT:N`` trains on fresh1..N only: a pool made at the commit that
opened its batches (``OPENED_BATCHES`` already counts them there) needs N = its first batch - 1, else
the model learns the very rows it is scored on. ``--with-opened``: a commit from before round 21, whose
``samples()`` read no opened batch, gets fresh1..N's rows added (its own fixtures of them). Recipes: ``base`` (character 3-5 and word 1-2 n-grams, a linear SVM,
sigmoid calibration: the shipped recipe), ``words`` (word n-grams only), ``faultweight`` (fault rows
weighted so all faults weigh what the healthy rows weigh, where healthy rows are the more), ``gate`` (the
base recipe on two labels, any fault against healthy: tools/learned_gate_replay.py's gate; the fitted
scikit-learn pipeline is pickled, not exported, as the plain scorer reads only multi-class models). Needs
scikit-learn; no network.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ("base", "words", "faultweight", "gate")

# Run in the commit's worktree (its faultlens first on the path), with the recipe and the output path as arguments.
_TRAIN = r"""
import pickle, sys
sys.path.insert(0, ".")
import numpy
from sklearn.calibration import CalibratedClassifierCV
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.svm import LinearSVC
from faultlens.parsing import line_corpus, line_model
from faultlens.parsing.line_scorer import export

recipe, out = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:  # a cap on the opened batches: never the pool's own rows
    line_corpus.OPENED_BATCHES = min(line_corpus.OPENED_BATCHES, int(sys.argv[3]))
samples = [(s.source, s.line, s.label) for s in line_corpus.samples()]
if len(sys.argv) > 4 and not hasattr(line_corpus, "opened_rows"):  # --with-opened: a commit before round 21
    import json
    for n in range(1, line_corpus.OPENED_BATCHES + 1):
        for path in sorted((line_corpus.CORPUS / f"fresh{n}").glob("*.jsonl")):
            rows = [json.loads(t) for t in path.read_text(encoding="utf-8").splitlines() if t.strip()]
            samples += line_model.corpus_samples(rows)
counts = {}
for _, _, label in samples:
    counts[label] = counts.get(label, 0) + 1
samples = [s for s in samples if counts[s[2]] >= 2]
texts = [f"{source} {line_model.normalise(line)}" for source, line, _ in samples]
labels = [label for _, _, label in samples]
if recipe == "gate":
    labels = ["healthy" if label == "healthy" else "fault" for label in labels]
parts = [] if recipe == "words" else [("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), min_df=2,
         max_features=12000, sublinear_tf=True, dtype=numpy.float32))]
parts.append(("words", TfidfVectorizer(analyzer="word", ngram_range=(1, 2), token_pattern=r"[A-Za-z_][A-Za-z_\-]+", min_df=1,
             max_features=6000, sublinear_tf=True, lowercase=True, dtype=numpy.float32)))
smallest = min(labels.count(c) for c in set(labels))
classifier = CalibratedClassifierCV(LinearSVC(C=1.0, random_state=0), method="sigmoid", cv=min(3, smallest), ensemble=False)
pipeline = Pipeline([("features", FeatureUnion(parts)), ("classifier", classifier)])
fit = {}
if recipe == "faultweight":
    healthy = labels.count("healthy")
    weight = max(1.0, healthy / max(len(labels) - healthy, 1))
    fit["classifier__sample_weight"] = numpy.array([1.0 if label == "healthy" else weight for label in labels])
pipeline.fit(texts, labels, **fit)
with open(out, "wb") as f:
    pickle.dump(pipeline if recipe == "gate" else export(pipeline), f)
print(recipe, len(samples), out)
"""


def retrain(commit: str, recipe: str, out: Path, through: int | None = None, with_opened: bool = False) -> Path:
    target = out / f"{commit[:8]}_{recipe}.pkl"
    cap = [] if through is None else [str(through)]
    if with_opened:
        cap = [cap[0] if cap else "999", "with-opened"]
    with tempfile.TemporaryDirectory(prefix="fallback_retrain_") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True, capture_output=True)
        try:
            subprocess.run([sys.executable, "-", recipe, str(target), *cap], cwd=tree, input=_TRAIN, text=True, check=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False, capture_output=True)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder for <commit8>_<recipe>.pkl")
    ap.add_argument("commits", nargs="+", help="commits to retrain at (the pools' commits), COMMIT:N to train on fresh1..N only")
    ap.add_argument("--recipe", choices=RECIPES, default="base")
    ap.add_argument("--with-opened", action="store_true", help="a commit before round 21, whose samples() reads no opened "
                    "batch: add fresh1..N (its OPENED_BATCHES or the cap) as round 21 began to")  # fmt: skip
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in args.commits:
        commit, _, through = spec.partition(":")
        retrain(commit, args.recipe, args.out.resolve(), int(through) if through else None, args.with_opened)
    return 0


if __name__ == "__main__":
    sys.exit(main())
