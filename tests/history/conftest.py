"""A small simulated, labelled trace shared by the history tests (built once per session)."""

from __future__ import annotations

import pytest

from faultlens.events.trace import labels_path, write_labels, write_trace
from faultlens.simulator.config import SimConfig
from faultlens.simulator.run import simulate


@pytest.fixture(scope="session")
def sim_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "sim.parquet"
    run = simulate(SimConfig(nodes=4, gpus=2, seed=3), duration=800)
    write_trace(path, run.events())
    write_labels(labels_path(path), run.labels)
    return path


@pytest.fixture
def conn():
    """The hand-written history (tests.history.known) with stack requests and record-only
    diagnoses (tests.history.requests); a test module may define its own ``conn``."""
    from faultlens.history.schema import memory_history
    from faultlens.history.sink import HistorySink, build_batch
    from tests.history import known, requests

    c = memory_history()
    HistorySink(c).write(build_batch(known.records() + requests.records()))
    yield c
    c.close()
