"""The topic registry: every topic faultlens reads or writes, with its key and default settings.

Partition counts and retention are defaults for one machine; a real cluster overrides them per
topic through :class:`streams.config.KafkaSettings` (``topic.<name>.partitions`` etc.).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.events import Envelope


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

_DAY_MS = str(24 * 3600 * 1000)
_WEEK_MS = str(7 * 24 * 3600 * 1000)

TOPICS: dict[str, TopicSpec] = {
    t.name: t
    for t in (
        TopicSpec(GPU, "node", 6, {"retention.ms": _DAY_MS}, "NVML samples, one message per node per interval; NVML Xid events"),
        TopicSpec(KERNEL, "node", 3, {"retention.ms": _WEEK_MS}, "kernel log events (Xid, fall-off-bus, mlx5, ECC, hung task, OOM, ...)"),
        TopicSpec(NCCL, "node", 3, {"retention.ms": _WEEK_MS}, "NCCL / torch.distributed / trainer log events"),
        TopicSpec(TRAIN, "node", 3, {"retention.ms": _WEEK_MS}, "training step telemetry from trainer_hooks"),
        TopicSpec(HEARTBEAT, "node", 3, {"retention.ms": _DAY_MS}, "node agent heartbeats"),
        TopicSpec(STACKS, "node", 3, {"retention.ms": _WEEK_MS}, "py-spy / faulthandler stack dumps"),
        TopicSpec(HOST, "node", 3, {"retention.ms": _DAY_MS}, "host-level samples (CPU, memory, disk)"),
        TopicSpec(CHECKS, "node", 3, {"retention.ms": _WEEK_MS}, "stop-time check results of node agents; dual-phase replay outcomes; node agents' command refusals"),
        TopicSpec(NET, "node", 3, {"retention.ms": _DAY_MS}, "NIC port counters (InfiniBand / RoCE), one message per node per interval"),
        TopicSpec(JOBS, "job", 1, {"cleanup.policy": "compact"}, "job topology, compacted, keyed by job"),
        TopicSpec(SUMMARIES, "job", 3, {"retention.ms": _DAY_MS}, "per-node window summaries and node-local findings for the job stage"),
        TopicSpec(DIAGNOSES, "job", 3, {"retention.ms": _WEEK_MS}, "diagnosis records"),
        TopicSpec(COMMANDS, "job", 3, {"retention.ms": _WEEK_MS}, "signed remediation commands"),
        TopicSpec(DEAD_LETTER, "node", 1, {"retention.ms": _WEEK_MS}, "messages no consumer could read, with the reason"),
        TopicSpec(ACTIONS, "job", 3, {"retention.ms": _WEEK_MS}, "what the remediation actuator did on the scheduler, with its outcome"),
        TopicSpec(REMEDIATION_STATE, "job", 3, {"cleanup.policy": "compact"},
                  "each job's escalation ladder, standbys handed out and checks awaited (remediate --state-topic)"),
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


def topic_for(event: Envelope) -> str:
    """The topic an envelope belongs on, by its source."""
    return SOURCE_TOPIC[event.source]
