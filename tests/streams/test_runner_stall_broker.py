"""A bounded run's idle stop across a stop of the process itself (SIGSTOP: a starved or
descheduled member), against the embedded broker: records written while the member was stopped
are read after it resumes. Before (session 25, F1's reproduction), the stop counted as quiet, the
first poll after it returned nothing and the lag, as the last fetch reported it, was 0: the member
stopped at once, the records unread."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from faultlens.events.envelope import Envelope, encode
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer
from faultlens.streams.runner.loop import GroupRunner

pytestmark = pytest.mark.broker

STOP_S = 6.0  # longer than the idle stop (3 s): quiet by wall time, none by polls
# The member is not kicked while stopped (a rebalance would restart its count anyway): Tansu holds a
# join for half of it (6 s at the run's start).
SESSION_TIMEOUT_MS = 12000


@pytest.fixture
def kafka_settings(broker) -> KafkaSettings:
    return KafkaSettings(bootstrap=broker.bootstrap, session_timeout_ms=SESSION_TIMEOUT_MS)

PRODUCE = """
import sys
from faultlens.events.envelope import Envelope, encode
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer
bootstrap, topic = sys.argv[1], sys.argv[2]
with Producer(KafkaSettings(bootstrap=bootstrap)) as p:
    for i in range(5, 10):
        e = Envelope(ts=1_790_000_000.0 + i, job="j", node="n0", source="gpu", kind="sample", data={"i": i})
        p.send(topic, e.key, encode(e))
    p.flush()
"""


@pytest.mark.long(30)
@pytest.mark.parametrize("client_settings", ["kafka-python"], indirect=True)
def test_records_written_while_the_member_was_stopped_are_read(client_settings, group_name, fresh_topic):
    topic = fresh_topic(1)
    with Producer(client_settings) as p:
        for i in range(5):
            e = Envelope(ts=1_790_000_000.0 + i, job="j", node="n0", source="gpu", kind="sample", data={"i": i})
            p.send(topic, e.key, encode(e))
        p.flush()
    seen: list[int] = []
    runner = GroupRunner(client_settings, group_name, [topic], lambda recs: seen.extend(r.value.data["i"] for r in recs) or [])
    run = threading.Thread(target=runner.run, kwargs={"idle_stop_s": 3, "handle_signals": False})
    run.start()
    deadline = time.monotonic() + 60
    while len(seen) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(seen) == 5
    time.sleep(1.0)  # quiet, in empty polls
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # stop this process; once the fetch it had sent came back empty, write 5 more; resume it
    script = (f"kill -STOP {os.getpid()}; sleep 1.5; {sys.executable} -c '{PRODUCE}' "
              f"{client_settings.bootstrap} {topic}; sleep {STOP_S - 1.5}; kill -CONT {os.getpid()}")
    stopper = subprocess.Popen(["sh", "-c", script], env=env)
    try:
        run.join(90)
    finally:
        stopper.wait(30)
        runner.stop()
        run.join(10)
    assert sorted(seen) == list(range(10))
