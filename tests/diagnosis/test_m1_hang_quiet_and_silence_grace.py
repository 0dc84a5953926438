"""The hang detector's whole-job quiet (HangConfig.quiet_s, 30 s) does not follow ``--silence-grace``.

``--silence-grace`` says how long a silence is let go before it is reported (node_silent,
telemetry_lost). The quiet says something else: from when on the job's telemetry has stopped, so
that its missing steps are no evidence of a hang (issue 47). A job whose stream stopped ten seconds
after its last step has beats a minute old "fresh" and steps past the 60 s floor: with a quiet of
120 s it was suspected of a hang (a capture_stacks at t=102, measured), where today it is only
telemetry_lost. So a longer grace delays the report; it must not make a stopped stream a hang.

Through the engine (`faultlens analyze`'s config from the flags), two jobs on one clock: job ``b``
steps on, which moves quiet job ``a``'s time as a trace's other jobs do offline (live, a clock moved
by the wall is never ticked into the hang detector: diagnosis/engine/stages.py)."""

from __future__ import annotations

import pytest

from bench.testbed.stack_samples import T0, beat_event, grid, step_event
from faultlens.cli import build_parser
from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.rules.liveness import GRACE_S
from faultlens.engine_flags import engine_config
from faultlens.events.topology import Topology

A = grid(4, 2, tp=2, pp=2, dp=2)
B = Topology.grid([f"m{i:03d}" for i in range(4)], 2, 2, 2, 2)


def _events(a_reports_until: int) -> list:
    """Job ``a`` steps every 2 s to t=40 and then stops stepping; its agents beat every 10 s until
    ``a_reports_until``. Job ``b`` steps and beats throughout, to t=600."""
    events = [A.to_event("a", T0), B.to_event("b", T0)]
    events += [step_event(2.0 * n + 0.001 * r, A, r, n, job="a") for n in range(1, 21) for r in A.by_rank]
    events += [beat_event(float(t), node, job="a") for t in range(0, a_reports_until + 1, 10) for node in A.nodes]
    events += [step_event(2.0 * n + 0.001 * r, B, r, n, job="b") for n in range(1, 301) for r in B.by_rank]
    events += [beat_event(float(t), node, job="b") for t in range(0, 601, 10) for node in B.nodes]
    return sorted(events, key=lambda e: e.ts)


def _analyze(events: list, silence_grace: str) -> list[tuple[str, str, float]]:
    config = engine_config(build_parser().parse_args(["analyze", "t.parquet", "--silence-grace", silence_grace]))
    assert config.silence_grace_s == float(silence_grace)
    assert config.implicit_config.hang.quiet_s == GRACE_S == 30.0
    return [(d.fault.value, d.action.value, round(d.ts - T0)) for d in analyze(events, Engine(config)) if d.job == "a"]


@pytest.mark.parametrize("silence_grace", ["30", "120"])
def test_a_stream_stopped_after_the_last_step_is_its_silence_never_a_hang(silence_grace):
    for stop in (50, 70):  # 10 and 30 s after a's last step
        out = _analyze(_events(stop), silence_grace)
        # reported once the grace the operator chose has passed, and nothing else
        assert out == [("telemetry_lost", "alert", stop + float(silence_grace) + 2)], out


@pytest.mark.parametrize("silence_grace", ["30", "120"])
def test_a_hang_whose_agents_beat_on_is_told_at_the_same_moment_whatever_the_grace(silence_grace):
    out = _analyze(_events(400), silence_grace)
    assert out[:2] == [("job_hang", "capture_stacks", 110), ("job_hang", "reattempt", 140)], out
