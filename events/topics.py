"""The topic registry: every topic faultlens reads or writes, with its key and default settings.

Partition counts and retention are defaults for one machine; a real cluster overrides them per
topic through :class:`streams.config.KafkaSettings` (``topic.<name>.partitions`` etc.).

The telemetry topics are co-partitioned, as Kafka Streams requires of the topics it joins: the
same partition count on each, so a node's key lands on the same partition number of every topic,
and the range assignor hands one member that number of every topic. The node stage's work is
node-local only while one member sees all of a node's events: its feature window joins NVML
samples (telemetry.gpu) with step times (telemetry.train). With 6 GPU partitions beside 3 train
partitions, two node-stage members split node n002 between them, each sent half a window under
the same id, and the job stage kept one half: a slow node's clock drift went unseen and a
two-signal fail-slow verdict became an alert.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from faultlens.events.envelope import Envelope


@dataclass(frozen=True)
class TopicSpec:
    name: str
    key: str  # what the message key is: "node" or "job"
    partitions: int = 3
    config: dict[str, str] = field(default_factory=dict)
    doc: str = ""


# Topic names; code names a topic only through these (or TOPICS / SOURCE_TOPIC).
GPU = "telemetry.gpu"
KERNEL = "telemetry.kernel"
NCCL = "telemetry.nccl"
TRAIN = "telemetry.train"
HEARTBEAT = "telemetry.heartbeat"
STACKS = "telemetry.stacks"
HOST = "telemetry.host"
CHECKS = "telemetry.checks"
NET = "telemetry.net"
JOBS = "jobs"
SUMMARIES = "summaries"
DIAGNOSES = "diagnoses"
COMMANDS = "commands"
DEAD_LETTER = "dead-letter"
ACTIONS = "actions"
REMEDIATION_STATE = "remediation.state"
FLEET = "fleet"

# Every telemetry topic has this many partitions by default (co-partitioned: the module doc).
TELEMETRY_PARTITIONS = 6

_DAY_MS = str(24 * 3600 * 1000)
_WEEK_MS = str(7 * 24 * 3600 * 1000)

TOPICS: dict[str, TopicSpec] = {
    t.name: t
    for t in (
        TopicSpec(GPU, "node", TELEMETRY_PARTITIONS, {"retention.ms": _DAY_MS}, "NVML samples, one message per node per interval; NVML Xid events"),
        TopicSpec(KERNEL, "node", TELEMETRY_PARTITIONS, {"retention.ms": _WEEK_MS}, "kernel log events (Xid, fall-off-bus, mlx5, ECC, hung task, OOM, ...)"),
        TopicSpec(NCCL, "node", TELEMETRY_PARTITIONS, {"retention.ms": _WEEK_MS}, "NCCL / torch.distributed / trainer log events"),
        TopicSpec(TRAIN, "node", TELEMETRY_PARTITIONS, {"retention.ms": _WEEK_MS}, "training step telemetry from trainer_hooks"),
        TopicSpec(HEARTBEAT, "node", TELEMETRY_PARTITIONS, {"retention.ms": _DAY_MS}, "node agent heartbeats"),
        TopicSpec(STACKS, "node", TELEMETRY_PARTITIONS, {"retention.ms": _WEEK_MS}, "py-spy / faulthandler stack dumps"),
        TopicSpec(HOST, "node", TELEMETRY_PARTITIONS, {"retention.ms": _DAY_MS}, "host-level samples (CPU, memory, disk)"),
        TopicSpec(CHECKS, "node", TELEMETRY_PARTITIONS, {"retention.ms": _WEEK_MS}, "stop-time check results of node agents; dual-phase reproduction outcomes; node agents' command refusals"),
        TopicSpec(NET, "node", TELEMETRY_PARTITIONS, {"retention.ms": _DAY_MS}, "NIC port counters (InfiniBand / RoCE), one message per node per interval"),
        TopicSpec(JOBS, "job", 1, {"cleanup.policy": "compact"}, "job topology, compacted, keyed by job"),
        TopicSpec(SUMMARIES, "job", 3, {"retention.ms": _DAY_MS}, "per-node window summaries and node-local findings for the job stage"),
        TopicSpec(DIAGNOSES, "job", 3, {"retention.ms": _WEEK_MS}, "diagnosis records"),
        TopicSpec(COMMANDS, "job", 3, {"retention.ms": _WEEK_MS}, "signed remediation commands"),
        TopicSpec(DEAD_LETTER, "node", 1, {"retention.ms": _WEEK_MS}, "messages no consumer could read, with the reason"),
        TopicSpec(ACTIONS, "job", 3, {"retention.ms": _WEEK_MS}, "what the remediation actuator did on the scheduler, with its outcome"),
        TopicSpec(REMEDIATION_STATE, "job", 3, {"cleanup.policy": "compact"},
                  "each job's escalation ladder, standbys handed out and checks awaited (remediate --state-topic)"),
        TopicSpec(FLEET, "node", 3, {"cleanup.policy": "compact"},
                  "each machine's record across jobs: faults, checks, evictions, lemon verdicts, resumes"),
    )
}

SOURCE_TOPIC = {
    "gpu": GPU,
    "kernel": KERNEL,
    "nccl": NCCL,
    "train": TRAIN,
    "heartbeat": HEARTBEAT,
    "stack": STACKS,
    "host": HOST,
    "net": NET,
    "job": JOBS,
    "summary": SUMMARIES,
    "check": CHECKS,
}

TELEMETRY_TOPICS = tuple(name for name in TOPICS if name.startswith("telemetry."))


def copartition_problem(counts: dict[str, int]) -> str | None:
    """Why topics that must be co-partitioned (the telemetry topics, for the node stage) are not,
    given each one's partition count; None when they are."""
    if len(set(counts.values())) <= 1:
        return None
    listed = ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))
    return (f"the telemetry topics must all have the same number of partitions (co-partitioned, so "
            f"one node-stage member reads all of a node's events), but they have: {listed}. Add "
            f"partitions to the smaller ones (kafka-topics --alter --partitions N) or set the same "
            f"`partitions` for every telemetry topic in the config file")


def key_partition(key: bytes, count: int) -> int:
    """The index of a keyed record's partition among ``count``: murmur2 of the key, the partitioner
    of kafka-python and of confluent-kafka as configured (streams/producer_backends.py uses this)."""
    from kafka.partitioner.default import murmur2  # kafka costs 0.1 s to import; not at start-up

    return (murmur2(key) & 0x7FFFFFFF) % count


@functools.lru_cache(maxsize=65536)
def telemetry_partition(node: str, count: int = TELEMETRY_PARTITIONS) -> int:
    """The partition number a node's telemetry lands on, of ``count``. Nodes that share it share a
    path to the node stage: they fall silent together when the partition or its node-stage member
    stops (diagnosis/rules/liveness.py)."""
    return key_partition(node.encode(), count)


def topic_for(event: Envelope) -> str:
    """The topic an envelope belongs on, by its source."""
    return SOURCE_TOPIC[event.source]
