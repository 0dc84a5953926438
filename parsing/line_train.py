"""``faultlens parse --train-model``: retrain the shipped line model (parsing/line_model.pkl.gz)
from the real-line corpus and the tables' examples, and say what it learned from.

Needs a checkout (the corpus lives in tests/fixtures/log_corpus) and scikit-learn.
"""

from __future__ import annotations

import json
import sys

from faultlens.parsing import line_corpus, line_model


def main() -> int:
    if not line_corpus.CORPUS.is_dir():
        print(f"faultlens parse --train-model: no corpus at {line_corpus.CORPUS} (run it in a checkout of faultlens)", file=sys.stderr)
        return 2
    try:
        model = line_corpus.retrain_shipped()
    except ImportError as exc:
        print(f"faultlens parse --train-model: needs scikit-learn ({exc})", file=sys.stderr)
        return 2
    print(json.dumps({"model": str(line_model.SHIPPED), "bytes": line_model.SHIPPED.stat().st_size, **model.meta}))
    return 0
