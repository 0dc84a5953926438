"""A whole job's telemetry lost for a while (a pipeline outage), then every agent back on its own
beat phase: the first half back is no word on the rest (tests/outside/test_outside_streams: 4 healthy
machines named node_silent), while a node that died during the outage is still found, once its peers
have reported on for a grace since they came back (diagnosis/rules/liveness.py, _going_on)."""

from __future__ import annotations

import random

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from tests.diagnosis.diag_events import T0, beat, nodes, topology

GAP = (300.0, 340.0)  # every record of the job in here is lost


def _beats(n: int, until: float, dead: str | None = None, seed: int = 7) -> list:
    """``n`` nodes beating every 5 s, each on its own phase; nothing of the job within GAP; ``dead``
    stops for good inside the gap."""
    rng = random.Random(seed)
    out = [topology(n=n, gpus=1, tp=1, pp=1)]
    for node in nodes(n):
        t = rng.uniform(0, 5)
        while t < until:
            if not GAP[0] <= t < GAP[1] and not (node == dead and t >= GAP[0]):
                out.append(beat(t, node))
            t += 5
    return sorted(out, key=lambda e: e.ts)


def _silent(found) -> list[tuple[str, tuple[str, ...]]]:
    return [(str(d.action), d.nodes) for d in found if d.fault == "node_silent"]


def test_every_agent_back_on_its_own_phase_after_an_outage_is_no_silent_node():
    for gap in (40.0, 60.0, 120.0):
        events = [e for e in _beats(8, 600) if not GAP[0] <= e.ts - T0 < GAP[0] + gap]
        assert _silent(analyze(events)) == [], gap


def test_a_node_that_died_during_the_outage_is_evicted_a_grace_after_its_peers_came_back():
    found = analyze(_beats(8, 600, dead="n003"))
    assert _silent(found) == [("evict", ("n003",))]
    [evict] = [d for d in found if d.fault == "node_silent"]
    assert GAP[1] + 30 <= evict.ts - T0 <= GAP[1] + 40  # the peers' word: a grace of reports since their return


def test_the_same_read_live_beside_the_wall_clock():
    e = Engine(EngineConfig(implicit=False))
    found = [d for event in _beats(8, 600) for d in e.process(event)]
    assert _silent(found) == []
