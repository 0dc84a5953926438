"""Scoring diagnoses against a trace's ground truth (``TRACE.labels.jsonl``, docs/design.md §8).

Matching, per label ``{"job", "fault", "nodes", "ranks", "onset"}``: a diagnosis matches when it
has the same job and fault class, was decided no earlier than ``early_s`` before the onset and
no later than ``window_s`` after it, and blames at least one of the label's nodes (a diagnosis
that blames no node, like a job-wide NaN, or a label without nodes, match on class and time).

* Not scored: record-only diagnoses (action ``none``), alerts for a person (action ``alert``: a
  suspicion without the evidence an eviction needs), requests for evidence (action
  ``capture_stacks``: a hang or fail-slow suspicion asks for stacks and blames nobody; its
  verdict is what counts) and ``unknown`` (input problems, not faults).
* Precision of a class: scored diagnoses of that class that match some label / all of them.
* Recall of a class: labels matched by at least one diagnosis / all labels of the class.
* Detection latency: decision time of the first matching diagnosis minus the label's onset.
* Healthy nodes blamed: distinct (job, node) pairs named by a diagnosis that matches no label,
  or named beside the culprit by a matching one, that no label around that time names. Groups
  evicted on purpose (hang / fail-slow: the parallel group is over-evicted by design) are
  counted apart, as ``over_evicted_nodes``. ``healthy_nodes_evicted`` is the part of
  ``healthy_nodes_blamed`` that an evicting action (evict, evict_reset_gpu, inspect_hardware) named.
* For hang and fail-slow, ``group_holds_culprit`` is k/n: of the n labels with an evicting
  diagnosis of their class in the window (whatever nodes it names), k have one that names every
  one of the label's nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from faultlens.events.diagnosis_record import Diagnosis

WINDOW_S = 600.0
EARLY_S = 30.0

# Detection latency has one definition wherever it is shown (`faultlens score`, the demo's summary,
# `faultlens report` and its HTML page): the decision time of the first diagnosis that finds a fault
# minus the fault's onset. The onset is the labelled one where there is ground truth (TRACE.labels.jsonl,
# the history's labels table) and otherwise the time of the diagnosis's first evidence, all a live
# system knows. These words go beside the number, so a reader knows which onset it was.
LATENCY_WORDS_LABELLED = "fault onset (ground truth) → first matching diagnosis"
LATENCY_WORDS_EVIDENCE = "first evidence → diagnosis (no ground truth)"
GROUP_CLASSES = ("job_hang", "fail_slow")


# Actions that take a machine out of the job: a healthy node named by one of these is the worst outcome.
EVICTING = frozenset({"evict", "evict_reset_gpu", "inspect_hardware"})


def is_scored(d: Diagnosis) -> bool:
    return d.action not in ("none", "capture_stacks", "alert") and d.fault != "unknown"


@dataclass
class ClassScore:
    fault: str
    labels: int = 0
    detected: int = 0
    diagnoses: int = 0
    true_positives: int = 0
    latencies: list[float] = field(default_factory=list)
    wrong_nodes: set = field(default_factory=set)
    group_checked: int = 0
    group_holds: int = 0

    @property
    def precision(self) -> float | None:
        return self.true_positives / self.diagnoses if self.diagnoses else None

    @property
    def recall(self) -> float | None:
        return self.detected / self.labels if self.labels else None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "fault": self.fault, "labels": self.labels, "detected": self.detected, "diagnoses": self.diagnoses,
            "true_positives": self.true_positives, "precision": _r(self.precision), "recall": _r(self.recall),
            "detection_latency_p50_s": _pct(self.latencies, 50), "detection_latency_p99_s": _pct(self.latencies, 99),
            "wrong_nodes": len(self.wrong_nodes),
        }
        if self.fault in GROUP_CLASSES:
            out["group_holds_culprit"] = f"{self.group_holds}/{self.group_checked}"
        return out


@dataclass
class Score:
    classes: dict[str, ClassScore]
    healthy_nodes_blamed: int
    over_evicted_nodes: int
    healthy_nodes_evicted: int
    unmatched: list[Diagnosis]
    missed: list[Mapping[str, Any]]

    def overall(self) -> dict[str, Any]:
        diags = sum(c.diagnoses for c in self.classes.values())
        tp = sum(c.true_positives for c in self.classes.values())
        labels = sum(c.labels for c in self.classes.values())
        detected = sum(c.detected for c in self.classes.values())
        lat = [x for c in self.classes.values() for x in c.latencies]
        checked = sum(c.group_checked for c in self.classes.values())
        holds = sum(c.group_holds for c in self.classes.values())
        return {
            "precision": _r(tp / diags) if diags else None,
            "recall": _r(detected / labels) if labels else None,
            "detection_latency_p50_s": _pct(lat, 50),
            "detection_latency_p99_s": _pct(lat, 99),
            "healthy_nodes_blamed": self.healthy_nodes_blamed,
            "healthy_nodes_evicted": self.healthy_nodes_evicted,
            "over_evicted_nodes": self.over_evicted_nodes,
            "labels": labels, "detected": detected, "diagnoses": diags, "true_positives": tp,
            "group_holds_culprit": f"{holds}/{checked}",
        }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def _matches(d: Diagnosis, label: Mapping[str, Any], early_s: float, window_s: float) -> bool:
    if d.fault != label["fault"] or d.job != label["job"]:
        return False
    onset = float(label["onset"])
    if not (onset - early_s <= d.ts <= onset + window_s):
        return False
    nodes = set(label.get("nodes") or ())
    return not nodes or not d.nodes or bool(nodes.intersection(d.nodes))


def score(diagnoses: Iterable[Diagnosis], labels: Iterable[Mapping[str, Any]], *, window_s: float = WINDOW_S,
          early_s: float = EARLY_S) -> Score:
    labels = list(labels)
    diags = [d for d in diagnoses if is_scored(d)]
    classes: dict[str, ClassScore] = {}
    for lab in labels:
        classes.setdefault(lab["fault"], ClassScore(lab["fault"])).labels += 1
    hit_labels: dict[int, list[Diagnosis]] = {}
    healthy: set[tuple[str, str]] = set()
    evicted: set[tuple[str, str]] = set()
    over: set[tuple[str, str]] = set()
    unmatched: list[Diagnosis] = []
    for d in diags:
        c = classes.setdefault(d.fault, ClassScore(d.fault))
        c.diagnoses += 1
        matched = [i for i, lab in enumerate(labels) if _matches(d, lab, early_s, window_s)]
        nearby = _labelled_nodes(labels, d, window_s)
        if matched:
            c.true_positives += 1
            for i in matched:
                hit_labels.setdefault(i, []).append(d)
        else:
            unmatched.append(d)
        for node in d.nodes:
            if node in nearby:
                continue
            if matched and (d.group or d.fault in GROUP_CLASSES):
                over.add((d.job, node))
            else:
                healthy.add((d.job, node))
                if d.action in EVICTING:
                    evicted.add((d.job, node))
                c.wrong_nodes.add((d.job, node))
    missed = []
    for i, lab in enumerate(labels):
        c = classes[lab["fault"]]
        found = hit_labels.get(i)
        if not found:
            missed.append(lab)
            continue
        c.detected += 1
        c.latencies.append(max(0.0, min(d.ts for d in found) - float(lab["onset"])))
    for lab in labels:
        # Judged on every evicting decision of the class around the onset, whatever nodes it names:
        # a group that misses the culprit must count against the localiser, not vanish as unmatched.
        if lab["fault"] in GROUP_CLASSES:
            c = classes[lab["fault"]]
            onset = float(lab["onset"])
            evicting = [d for d in diags if d.fault == lab["fault"] and d.job == lab["job"]
                        and d.action in EVICTING and onset - early_s <= d.ts <= onset + window_s]
            if evicting:
                c.group_checked += 1
                culprit = set(lab.get("nodes") or ())
                c.group_holds += any(culprit <= set(d.nodes) for d in evicting)
    return Score(classes, len(healthy), len(over), len(evicted), unmatched, missed)


def _labelled_nodes(labels: list[Mapping[str, Any]], d: Diagnosis, window_s: float) -> set[str]:
    """Nodes some label of the same job names around the diagnosis time (any class)."""
    out: set[str] = set()
    for lab in labels:
        if lab["job"] == d.job and float(lab["onset"]) - EARLY_S <= d.ts <= float(lab["onset"]) + window_s:
            out.update(lab.get("nodes") or ())
    return out

