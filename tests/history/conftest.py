"""A small simulated, labelled trace shared by the history tests (built once per session)."""

from __future__ import annotations

import pytest

from simulator.config import SimConfig
from simulator.run import simulate
from streams.trace import labels_path, write_labels, write_trace


@pytest.fixture(scope="session")
def sim_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "sim.parquet"
    run = simulate(SimConfig(nodes=4, gpus=2, seed=3), duration=800)
    write_trace(path, run.events())
    write_labels(labels_path(path), run.labels)
    return path
