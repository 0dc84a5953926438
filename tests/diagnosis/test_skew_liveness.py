"""A machine whose clock is off is judged on its corrected clock: never node_silent while it reports
on, still found when it really stops (outside check round 3: a healthy machine 30 s behind was
evicted at a trace's end, tests/outside/test_outside_sre.py)."""

from __future__ import annotations

import random

import pytest

from faultlens.diagnosis.rules.liveness import SilenceDetector
from faultlens.diagnosis.rules.step_clocks import StepClocks
from tests.diagnosis.diag_events import JOB, T0, beat, nodes, step

NODES = nodes(16)
ODD = "n006"


def _stream(
    until: float, skew: dict[str, float], stop: dict[str, float] | None = None, step_s: float = 2.0, seed: int = 1
) -> list[tuple[float, object]]:
    """(real time, event) for every node: a beat every 5 s on its own phase and a step report every
    ``step_s`` (all nodes end a step together); each stamp carries its node's clock error."""
    rng = random.Random(seed)
    stop = stop or {}
    out = []
    for i, n in enumerate(NODES):
        end, off = min(until, stop.get(n, until)), skew.get(n, 0.0)
        t = rng.uniform(0, 5)
        while t < end:
            out.append((t, beat(t + off, n)))
            t += 5.0
        k, t = 0, 1.0
        while t < end:
            k += 1
            out.append((t, step(t + off + rng.uniform(0, 0.05), n, i, k)))
            t += step_s
    return out


def _judged(stream, *, live: bool = False) -> list:
    """Offline (and as a backlog) the events come in stamp order and the job's time is the latest
    stamp; live they come as sent, stamped by their own clocks, and the job's time is the wall's."""
    det = SilenceDetector(grace_s=30)
    found = []
    now = float("-inf")
    for real, e in sorted(stream, key=lambda p: p[0] if live else p[1].ts):
        found += det.observe(e)
        now = max(now, T0 + real if live else e.ts)
        found += det.tick(now)
    return found


def _evicted(found) -> list:
    return [(d.fault, d.nodes) for d in found if d.action == "evict"]


@pytest.mark.parametrize("live", [False, True])
@pytest.mark.parametrize("error", [-30.0, -60.0, -120.0, 30.0, 120.0])
def test_a_healthy_machine_whose_clock_is_off_is_never_silent(error, live):
    """Before: 30 s behind, its last beat stamped 30 s before its peers' last ones made it node_silent,
    action evict, at the stream's end (offline); 60 s behind, at once, live too."""
    found = _judged(_stream(600, {ODD: error}), live=live)
    assert _evicted(found) == []
    assert [d for d in found if d.fault == "node_silent"] == []
    [skew] = [d for d in found if d.fault == "clock_skew"]
    assert skew.nodes == (ODD,) and skew.action == "none"
    side = "behind" if error < 0 else "ahead of"
    assert f"runs {abs(error):.0f}s {side} its peers'" in skew.detail


@pytest.mark.parametrize("live", [False, True])
@pytest.mark.parametrize("error", [-30.0, -120.0, 60.0])
def test_a_machine_whose_clock_is_off_that_really_stops_is_still_evicted(error, live):
    """Dead at 300 s while its 15 peers go on: evicted, its onset on the job's clock (its last beat,
    corrected). Before, a clock ahead put the onset ``error`` seconds late."""
    found = _judged(_stream(600, {ODD: error}, stop={ODD: 300.0}), live=live)
    [evict] = [d for d in found if d.action == "evict"]
    assert evict.fault == "node_silent" and evict.nodes == (ODD,)
    assert 290.0 <= evict.onset - T0 <= 300.0
    assert "corrected by" in evict.detail
    # Found a grace after it stopped (plus a beat); a clock ahead is read that much later (its stamps
    # are), and its silence is judged only on what was read of it.
    assert evict.ts - T0 <= 300.0 + 30.0 + 5.0 + max(error, 0.0) + 1.0


def test_a_job_whose_every_node_beats_on_time_is_left_as_it_was():
    found = _judged(_stream(600, {}))
    assert found == []


def test_a_machine_20s_behind_that_stops_is_judged_as_before():
    found = _judged(_stream(600, {ODD: -20.0}, stop={ODD: 300.0}))
    assert _evicted(found) == [("node_silent", (ODD,))]


def _clocks(errors: dict[str, float], jitter: dict[str, float] | None = None, steps: int = 40, n: int = 8) -> StepClocks:
    clocks = StepClocks()
    rng = random.Random(3)
    jitter = jitter or {}
    for k in range(1, steps + 1):
        for node in nodes(n):
            wobble = rng.uniform(-jitter.get(node, 0.0), jitter.get(node, 0.0))
            clocks.observe(JOB, node, k, T0 + 2.0 * k + errors.get(node, 0.0) + wobble, f"s{k}{node}", False)
    return clocks


def test_a_steady_offset_is_measured_from_the_steps_alone():
    clocks = _clocks({"n002": -30.0, "n005": 45.0})
    assert {n: round(o) for n, o in clocks.offsets[JOB].items()} == {"n002": -30, "n005": 45}


def test_pipeline_stages_a_few_seconds_apart_are_no_clock_error():
    """The last stage of a pipeline ends each step later than the first: no offset under 10 s is used."""
    clocks = _clocks({f"n00{i}": 1.2 * i for i in range(8)})
    assert clocks.offsets.get(JOB, {}) == {}


def test_an_offset_that_does_not_hold_still_is_not_believed():
    clocks = _clocks({"n003": 20.0}, jitter={"n003": 30.0})
    assert "n003" not in clocks.offsets.get(JOB, {})


def test_two_nodes_cannot_say_whose_clock_is_wrong():
    clocks = _clocks({"n001": 30.0}, n=2)
    assert clocks.offsets.get(JOB, {}) == {}


def test_a_rollback_measures_again_from_the_steps_run_again():
    """Step numbers go back after a rollback: the node's old stamps for them are not its new ones."""
    clocks = _clocks({"n002": -30.0})
    for k in range(20, 60):  # rolled back to 20, the clock of n002 fixed meanwhile
        for node in nodes(8):
            clocks.observe(JOB, node, k, T0 + 200.0 + 2.0 * k, f"r{k}{node}", k == 20)
    assert "n002" not in clocks.offsets.get(JOB, {})
