"""A job stage does not check again the payloads a node stage passed on (it checked them), so a
damaged one written into `summaries` by someone else must cost at most itself: an exception the
runner dead-letters, never a job stage that stops judging the events after it."""

from __future__ import annotations

import pytest

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.events.envelope import Envelope, InvalidEvent
from tests.diagnosis.diag_events import T0, nodes, step, topology

DAMAGED = [
    ("net", "sample", {"ports": "eth0"}),
    ("net", "sample", {"ports": [{"name": 3, "rx_bytes": "lots", "counters": [1]}], "interval_s": "1"}),
    ("train", "step", {"rank": "three", "step": None, "step_time_s": "slow"}),
    ("heartbeat", "beat", {"seq": [], "pids": "1,2"}),
    ("nccl", "error", {"rank": {}, "peer": "x"}),
    ("stack", "stack_dump", {"rank": -1, "threads": "garbage"}),
]


def _runner_handled(engine: Engine, event: Envelope) -> None:
    try:
        engine.process(event)
    except (InvalidEvent, ValueError, TypeError, KeyError, AttributeError, IndexError):
        pass  # the runner dead-letters the record that raised


@pytest.mark.parametrize("source,kind,data", DAMAGED)
def test_a_damaged_forwarded_event_costs_only_itself(source, kind, data):
    names = nodes(4)
    engine = Engine(EngineConfig(stage="job"))
    engine.process(topology(4, gpus=1, tp=2, pp=2))
    for i in range(3):
        for r, n in enumerate(names):
            engine.process(step(10.0 * i, n, rank=r, n=i))
    _runner_handled(engine, Envelope(ts=T0 + 25, job="job-t", node="n001", source=source, kind=kind, data=data,
                                     id=f"bad-{source}-{kind}"))
    # the job goes on being judged: every step after the damaged event is taken
    before = engine.stats["events"]
    for i in range(3, 6):
        for r, n in enumerate(names):
            engine.process(step(10.0 * i, n, rank=r, n=i))
    assert engine.stats["events"] == before + 12
