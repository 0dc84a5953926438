"""The peer model's isolation forests: one per job, fitted on the job's own healthy rows.

Both peer detectors of diagnosis/peers/anomaly.py (per window, and the slow-drift judge) ask the same
question: is this row of peer z-scores unlike every healthy row the job produced so far? A row
is an outlier when it scores below all but the lowest ``QUANTILE`` of the healthy rows; the
callers' z gates and persistence keep that 1 % from becoming false alarms.

The forest is refitted as the healthy history doubles (then every ``REFIT_EVERY`` rows): cheap
early, stable later. Scoring goes through :class:`ForestScorer`, which gives the fitted forest's
``score_samples`` without scikit-learn's per-call parallel dispatch (a few milliseconds a call,
paid every window a node stands out: most of the peer model's cost on a long drift).
"""

from __future__ import annotations

import numpy as np

MIN_ROWS = 200
REFIT_EVERY = 20000
QUANTILE = 0.01
KEEP = 5000  # the most recent healthy rows a fit sees (bounded memory)


def _average_path_length(n: np.ndarray) -> np.ndarray:
    """Expected path length of an unsuccessful search in a binary search tree of n points
    (Liu et al., Isolation Forest, 2008): the correction for a leaf that still holds n samples."""
    n = np.asarray(n, dtype=float)
    out = np.zeros_like(n)
    out[n == 2] = 1.0
    big = n > 2
    out[big] = 2.0 * (np.log(n[big] - 1.0) + np.euler_gamma) - 2.0 * (n[big] - 1.0) / n[big]
    return out


class ForestScorer:
    """``score_samples`` of a fitted :class:`sklearn.ensemble.IsolationForest`: the same numbers to
    the last digit (each tree's leaf term and the sum over trees are done in scikit-learn's order;
    tests/diagnosis/test_drift.py compares them bit for bit)."""

    def __init__(self, model) -> None:
        self._trees = []
        for est, feats in zip(model.estimators_, model.estimators_features_, strict=True):
            tree = est.tree_
            nodes_on_path = np.ones(tree.node_count)  # the root counts, as in scikit-learn's path length
            stack = [0]
            while stack:
                node = stack.pop()
                for child in (tree.children_left[node], tree.children_right[node]):
                    if child >= 0:
                        nodes_on_path[child] = nodes_on_path[node] + 1.0
                        stack.append(child)
            # The path to a leaf plus the expected rest of the path inside it, per node, computed as
            # scikit-learn computes it per sample ((nodes + rest) - 1), so indexing it gives its terms.
            self._trees.append((tree, np.asarray(feats), nodes_on_path + _average_path_length(tree.n_node_samples) - 1.0))
        self._norm = len(self._trees) * _average_path_length(np.array([model.max_samples_]))

    def score_samples(self, rows: np.ndarray) -> np.ndarray:
        """Every row at once: one pass of each tree over the whole batch (a row's score does not
        depend on the others')."""
        x = np.asarray(rows, dtype=np.float32)
        total = np.zeros(len(x))
        for tree, feats, path in self._trees:
            total += path[tree.apply(np.ascontiguousarray(x[:, feats]))]
        return -(2 ** (-np.divide(total, self._norm)))


class JobForests:
    """Healthy rows and a fitted forest per job."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rows: dict[str, list[list[float]]] = {}
        self._fitted: dict[str, tuple[ForestScorer, float, int]] = {}

    def add_healthy(self, job: str, row) -> None:
        self._rows.setdefault(job, []).append(list(row))

    def flags(self, job: str, vectors: np.ndarray, ask: np.ndarray) -> np.ndarray:
        """Which of the asked rows the job's forest calls outliers (none before it has MIN_ROWS)."""
        flags = np.zeros(len(vectors), dtype=bool)
        rows = self._rows.get(job, [])
        fitted = self._fitted.get(job)
        if len(rows) >= MIN_ROWS and (fitted is None or len(rows) - fitted[2] >= min(fitted[2], REFIT_EVERY)):
            from sklearn.ensemble import IsolationForest

            train = np.array(rows[-KEEP:])
            scorer = ForestScorer(IsolationForest(n_estimators=50, random_state=self.seed).fit(train))
            cut = float(np.quantile(scorer.score_samples(train), QUANTILE))
            if len(rows) > 2 * KEEP:
                del rows[:-KEEP]
            fitted = self._fitted[job] = (scorer, cut, len(rows))
        if fitted is not None and ask.any():
            scorer, cut, _ = fitted
            flags[ask] = scorer.score_samples(vectors[ask]) < cut
        return flags
