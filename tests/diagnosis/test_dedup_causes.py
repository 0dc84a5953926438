"""Consequence suppression (diagnosis/engine/dedup_causes.py): which primaries stop the job, so the
collective failures and hangs that follow on their peers are their echo."""

from __future__ import annotations

import pytest

from faultlens.diagnosis.engine.dedup import Dedup
from faultlens.diagnosis.engine.dedup_causes import stops_job
from faultlens.diagnosis.rules.base import Finding
from tests.diagnosis.diag_events import T0


def _f(ts, fault, action, node="n001", entity="e", **kw):
    return Finding(job="j", ts=T0 + ts, fault=fault, action=action, nodes=(node,), entity=entity, evidence=(f"e{ts}",), **kw)


def _everyone(ts, fault, action, onset):
    """A finding that names every machine of a 16-machine job (a hang with no culprit)."""
    nodes = tuple(f"n{i:03d}" for i in range(16))
    return Finding(job="j", ts=T0 + ts, fault=fault, action=action, nodes=nodes, entity="all", onset=T0 + onset)


@pytest.mark.parametrize(
    ("fault", "action", "stops"),
    [
        ("nic", "evict", True),  # a port down for good (or flapping twice) breaks every collective through it
        ("nic", "alert", False),  # one flap, tolerated
        ("gpu_memory", "evict_reset_gpu", True),  # Xid 48 / 95: the process that touched it dies
        ("gpu_memory", "evict", True),  # the uncorrectable counters rose
        ("gpu_memory", "reattempt", True),  # Xid 94, contained: its process dies
        ("gpu_memory", "none", False),  # Xid 63, a remap recorded
        ("nvlink", "evict", False),
        ("cuda_error", "stop_time_diagnosis", True),
        ("fail_slow", "evict", False),
    ],
)
def test_which_primaries_stop_the_job(fault, action, stops):
    assert stops_job(fault, action) is stops


def test_a_hang_after_a_port_went_down_for_good_is_its_echo():
    """nic_wave (tests/outside/fleet_shapes.py): the port goes down, no step ends after; the hang
    names every machine (no dumps, no culprit). Before, `nic` was no job-stopping primary and the
    hang was a reattempt naming all 16."""
    d = Dedup(job_size=lambda job: 16)
    [nic] = d.admit(_f(60, "nic", "evict", node="n009", entity="net:mlx5_0/1", onset=T0))
    assert nic.action == "evict"
    assert d.admit_diagnosis(_everyone(90, "job_hang", "reattempt", onset=-4).to_diagnosis()) == []
    assert d.stats["consequence"] == 1


def test_a_tolerated_flap_explains_no_hang():
    d = Dedup(job_size=lambda job: 16)
    d.admit(_f(0, "nic", "alert", node="n009", entity="nic:mlx5_0"))
    [hang] = d.admit_diagnosis(_everyone(30, "job_hang", "reattempt", onset=-4).to_diagnosis())
    assert hang.fault == "job_hang"


def test_a_port_down_held_by_the_wave_window_explains_the_hang_meanwhile():
    """The nic eviction waits the wave window (diagnosis/engine/waves.py) while the hang's verdict
    comes: held, it explains from its own time on, as if judged at once."""
    d = Dedup(job_size=lambda job: 16)
    d.note_held(_f(60, "nic", "evict", node="n009", entity="net:mlx5_0/1", onset=T0))
    assert d.admit_diagnosis(_everyone(86, "job_hang", "reattempt", onset=-4).to_diagnosis()) == []


def test_the_peers_nccl_errors_after_an_uncorrectable_memory_error_are_its_echo():
    """xid48_noise: the peers' "remote process exited" 20 s after the Xid 48 named rank 0's healthy
    machine in an nccl_error reattempt (gpu_memory was no job-stopping primary)."""
    d = Dedup(job_size=lambda job: 16)
    [xid] = d.admit(_f(0, "gpu_memory", "evict_reset_gpu", node="n003", entity="gpu:0000:2a:00"))
    assert xid.nodes == ("n003",)
    assert d.admit(_f(20, "nccl_error", "reattempt", node="n000", entity="nccl")) == []  # held
    assert d.tick(T0 + 23) == [] and d.stats["consequence"] == 1
    assert d.flush() == []


def test_an_nccl_error_long_after_a_memory_error_is_its_own():
    d = Dedup(job_size=lambda job: 16)
    d.admit(_f(0, "gpu_memory", "evict", node="n003", entity="gpu:1"))
    assert d.admit(_f(200, "nccl_error", "reattempt", node="n000", entity="nccl")) == []
    [nccl] = d.tick(T0 + 203)
    assert (nccl.fault, nccl.nodes) == ("nccl_error", ("n000",))
