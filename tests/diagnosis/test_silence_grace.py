"""`--silence-grace` sets how long a node may report nothing while its peers report on before it
is node_silent; `--grace` (the job clock's grace) no longer stands for it, nor it for `--grace`.
Before, the silence detector's grace was always 30 s whatever the flags said."""

from __future__ import annotations

import pytest

from faultlens.cli import build_parser
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.engine_flags import engine_config
from tests.diagnosis.diag_events import beat, nodes, topology

NODES = nodes(8)


def _beats_with_a_gap(gap_s: float, until: float = 400.0) -> list:
    """Every node beats every 10 s from its own phase; n005 says nothing for ``gap_s`` after 120 s."""
    out = []
    for k, n in enumerate(NODES):
        t = k * 1.25
        while t < until:
            if not (n == "n005" and 120 < t < 120 + gap_s):
                out.append(beat(t, n))
            t += 10.0
    return sorted(out, key=lambda e: e.ts)


def _silent(config: EngineConfig, gap_s: float) -> list[tuple[str, tuple[str, ...]]]:
    e = Engine(config)
    found = list(e.process(topology(n=8, gpus=8, tp=8, pp=1)))
    for ev in _beats_with_a_gap(gap_s):
        found += e.process(ev)
    found += e.flush()
    return [(d.fault, d.nodes) for d in found if d.fault == "node_silent"]


@pytest.mark.parametrize("silence_grace_s, evicted", [(30.0, True), (60.0, False)])
def test_the_silence_grace_decides_whether_a_45_s_gap_is_a_silent_node(silence_grace_s, evicted):
    config = EngineConfig(implicit=False, peer_model=False, silence_grace_s=silence_grace_s)
    assert (_silent(config, 45.0) == [("node_silent", ("n005",))]) is evicted


def test_the_job_clock_grace_does_not_move_the_silence_grace():
    # A long clock grace (a slow pipeline) leaves a 45 s gap a silent node, as before.
    config = EngineConfig(implicit=False, peer_model=False, grace_s=120.0)
    assert _silent(config, 45.0) == [("node_silent", ("n005",))]


def test_the_flag_and_its_environment_variable(monkeypatch):
    parser = build_parser()
    assert engine_config(parser.parse_args(["analyze", "t.parquet"])).silence_grace_s == 30.0
    config = engine_config(parser.parse_args(["analyze", "t.parquet", "--silence-grace", "90", "--grace", "12"]))
    assert (config.silence_grace_s, config.grace_s) == (90.0, 12.0)
    monkeypatch.setenv("FAULTLENS_SILENCE_GRACE_S", "45")
    assert engine_config(build_parser().parse_args(["diagnose"])).silence_grace_s == 45.0
