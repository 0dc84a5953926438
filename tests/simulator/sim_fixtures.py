"""Simulated traces for tests: a small cluster with one fault of every class, built once per session.

Use from a test module with ``from tests.simulator.sim_fixtures import *  # noqa: F403`` or by
importing the fixtures by name (pytest finds fixtures imported into a test module).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from faultlens.events.envelope import Envelope
from faultlens.events.trace import labels_path, write_labels, write_trace
from faultlens.simulator import SIM_CLASSES, SimConfig, simulate

# 8 nodes × 4 GPUs: TP=4 inside a node, PP=4, DP=2 (so a hang has PP peers and grad-sync ranks).
SMALL = SimConfig(nodes=8, gpus=4, seed=7, job="job-sim-test")


@dataclass
class SimTrace:
    config: SimConfig
    events: list[Envelope]
    labels: list[dict[str, Any]]
    path: Path

    def label(self, fault: str) -> dict[str, Any]:
        return next(label for label in self.labels if label["fault"] == fault)

    def window(self, label: dict[str, Any], before: float = 0.0, after: float = 0.0) -> list[Envelope]:
        return [e for e in self.events if label["onset"] - before <= e.ts < label["end"] + after]


def build(config: SimConfig = SMALL, faults: int = len(SIM_CLASSES)) -> tuple[list[Envelope], list[dict[str, Any]]]:
    run = simulate(config, faults=faults)
    events = list(run.events())
    return events, run.labels


@pytest.fixture(scope="session")
def every_class_trace(tmp_path_factory) -> SimTrace:
    """One simulated trace with every fault class, written to disk once for the session."""
    events, labels = build()
    path = Path(tmp_path_factory.mktemp("sim")) / "every_class.parquet"
    write_trace(path, events)
    write_labels(labels_path(path), labels)
    return SimTrace(SMALL, events, labels, path)
