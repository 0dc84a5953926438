"""The pytest fixtures of the real one-machine Slurm cluster (bench/testbed/slurm_cluster.py, which
the Slurm bench starts too). Tests that use them have ``slurm`` in their names (docs/design.md §9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.testbed.slurm_cluster import GHOST_NODES, REAL_NODE, SlurmCluster, skip_reason

__all__ = ["GHOST_NODES", "REAL_NODE", "SlurmCluster", "skip_reason", "slurm_cluster", "slurm_controller"]


def _started(path: Path, **kwargs):
    """A started :class:`SlurmCluster`, stopped after; the test is skipped, saying why, where Slurm
    cannot run."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster(path, **kwargs)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A cluster with this machine's slurmd, for the tests of a module (tests/conftest.py registers
    this module's fixtures)."""
    yield from _started(tmp_path_factory.mktemp("slurm"))


@pytest.fixture
def slurm_controller(tmp_path):
    """A controller with no slurmd, for one test: enough to drain and resume machines."""
    yield from _started(tmp_path / "slurm", with_slurmd=False)
