"""The foreign traces (tests/fixtures/foreign/, written by hand from docs/events.md) read through
Kafka as a backlog by split stages: N node-stage members and one job-stage member on a fresh
embedded broker. Prints, per case, whether what the ladder acts on equals the offline engine's
answer, which nodes were evicted and which of those no label names (healthy machines evicted).

    .venv/bin/python -m bench.check_foreign_backlog [--client kafka-python|confluent] [--node-members 2] [CASE ...]

Found on 2026-11-23 (and on the commit before that session): `dead_agent` evicts the healthy
n007 at 657 s (`node_silent`, "no heartbeat for 362s") after the right agent alert at 330 s,
with 1 or 2 node-stage members; offline gives the alert only. `failslow_corroborated` gives no
verdict with 2 node-stage members (right with 1). Every other case matches the offline answer.

Mended on 2026-11-25: the liveness rule judged an agent-down node's ranks against the job's most
advanced node (the first to report after a checkpoint pause); the telemetry topics had 6 GPU and
3 train partitions, so two members split a node's feature window. Since then all 14 cases match
with 2 kafka-python members and with 3 confluent members, no healthy machine evicted.
"""
import argparse
import threading
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

from bench.testbed import foreign
from bench.testbed.backlog_split import acting
from bench.testbed.topic_reads import job_records
from faultlens.diagnosis.edge.consumer import diagnose_consumer
from faultlens.diagnosis.engine.offline import analyze
from faultlens.diagnosis.replay.scoring import EVICTING
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.trace import write_trace
from faultlens.streams.admin import ensure_topics
from faultlens.streams.broker import EmbeddedBroker
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer
from faultlens.streams.replay import replay_trace


def members(s: KafkaSettings, tag: str, stage: str, n: int, idle: float) -> list:
    """n members of one stage's group, each running on a thread until idle for `idle` seconds."""
    ms = [diagnose_consumer(s, None, stage=stage, group=f"{stage}-{tag}") for _ in range(n)]
    th = [threading.Thread(target=r.run, kwargs={"idle_stop_s": idle, "handle_signals": False}, daemon=True) for r, _ in ms]
    for t in th:
        t.start()
    return list(zip(th, ms, strict=True))


ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--client", default="kafka-python")
ap.add_argument("--node-members", type=int, default=2)
ap.add_argument("cases", nargs="*")
args = ap.parse_args()
client = args.client
cases = args.cases or foreign.names()

total_healthy_evicted = 0
for name in cases:
    tr = foreign.load(name)
    offline = analyze(tr.events)
    culprits = {n for label in tr.labels for n in (label.get("nodes") or [])}
    with TemporaryDirectory() as tmp, EmbeddedBroker() as b:
        s = KafkaSettings(bootstrap=b.bootstrap, client=client)
        ensure_topics(s)
        path = Path(tmp) / "t.parquet"
        write_trace(path, tr.events)
        tag = uuid.uuid4().hex[:6]
        jobs = members(s, tag, "job", 1, 25)
        replay_trace(s, path, speed=0, show_progress=False)
        nodes = members(s, tag, "node", args.node_members, 6)
        for group in (nodes, jobs):
            with Producer(s) as p:
                for t, (_, h) in group:
                    t.join(180)
                    p.send_all(h.flush())
                p.flush()
        live = job_records(s, "diagnoses", Diagnosis.decode, tr.job, idle_s=1.5)
    evicted = {n for d in live if d.action in EVICTING for n in d.nodes}
    healthy = evicted - culprits
    total_healthy_evicted += len(healthy)
    same = acting(live) == acting(offline)
    print(f"{name:28s} live {len(live):3d} offline {len(offline):3d} same-acting {same} evicted {sorted(evicted)} healthy-evicted {sorted(healthy)}", flush=True)
    if not same or healthy:
        for d in live:
            print("   live   ", d.fault, d.action, d.nodes, round(d.ts - foreign.T0), d.detail[:160])
        for d in offline:
            print("   offline", d.fault, d.action, d.nodes, round(d.ts - foreign.T0), d.detail[:160])
print("healthy machines evicted in all:", total_healthy_evicted)
