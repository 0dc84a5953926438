"""Payload Structs of the job's own records and of the stages' summaries: sources ``job`` (the
launchers, events/topology.py) and ``summary`` (the node stage to the job stage, topic
``summaries``) (docs/events.md; the rules every field follows: events/payload_fields.py).

The summaries' readers (diagnosis/peers/features.py ``NodeWindow.from_event``, diagnosis/rules/base.py
``Finding.from_event``) build their records from these Structs. diagnosis/edge/node_consumer.py's
``watermark_of`` reads a watermark's ``data`` key by key: the runner reads it before any intake
check, and a word that says its coverage badly still counts for its watermark.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from faultlens.events.diagnosis_record import Action, FaultClass
from faultlens.events.payload_fields import Flag, NonNeg, NonNegInt, Number, Payload, Text

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]


# --- source `job` (trainer_hooks/launcher.py, trainer_hooks/elastic_run.py, the simulator) ------


class RankPlacement(Payload, frozen=True):
    """One rank of a ``job``/``topology``: its node and its coordinates on the three axes."""

    rank: NonNegInt
    node: Text
    tp: NonNegInt
    pp: NonNegInt
    dp: NonNegInt


class MachinePlace(Payload, frozen=True):
    """Where one machine of a ``job``/``topology`` sits, as its node agent or the scheduler can read
    it (all optional): what the machines of a wave share names its cause (diagnosis/engine/waves.py)."""

    rack: Text | None = None
    nvlink_domain: Text | None = None  # an NVLink domain (a GB200 NVL72 rack, an NVSwitch tray set)
    nvlink_clique: Text | int | None = None  # the fabric manager's clique id within the domain
    ib_switch: Text | list[Text] | None = None  # GUID of the IB switch each fabric port is cabled to
    ib_port: int | Text | list[int | Text] | None = None  # that switch's port(s)


class JobTopology(Payload, frozen=True):
    """``job``/``topology``: the parallel layout (docs/design.md §2; events/topology.py checks the
    coordinates against the sizes)."""

    tp: PositiveInt | None = None
    pp: PositiveInt | None = None
    dp: PositiveInt | None = None
    ranks: list[RankPlacement] | None = None
    gpus_per_node: PositiveInt | None = None
    machines: dict[Text, MachinePlace] | None = None  # machine name → where it sits (optional)


class JobRestart(Payload, frozen=True):
    """``job``/``restart``: the launcher restarted the job (``command_id`` null or empty when it
    restarted on exit codes alone)."""

    reason: Text | None = None
    command_id: Text | None = None
    nodes_out: list[Text] | None = None
    nodes_in: list[Text] | None = None
    attempt: NonNegInt | None = None
    resume: Literal["latest", "rollback"] | None = None


class JobEnd(Payload, frozen=True):
    """``job``/``end``: the launcher's last word (``reason``: finished, stopped, cancelled, gave_up,
    failed)."""

    reason: Text | None = None
    attempt: NonNegInt | None = None
    command_id: Text | None = None
    nodes: list[Text] | None = None


# --- source `summary` (diagnosis/edge/node_consumer.py) ---------------------------------------------


class SummaryWindow(Payload, frozen=True):
    """``summary``/``window``: one node's feature window (diagnosis/peers/features.py ``NodeWindow``)."""

    start: Number | None = None
    features: dict[Text, Number] | None = None
    samples: NonNegInt | None = None
    ranks: list[NonNegInt] | None = None
    evidence: list[Text] | None = None


class SummaryFinding(Payload, frozen=True):
    """``summary``/``finding``: a node-local finding (diagnosis/rules/base.py ``Finding.to_event``)."""

    fault: FaultClass | None = None
    action: Action | None = None
    nodes: list[Text] | None = None
    entity: Text | None = None
    ranks: list[NonNegInt] | None = None
    group: Text | None = None
    confidence: NonNeg | None = None
    evidence: list[Text] | None = None
    detail: Text | None = None
    onset: Number | None = None
    sympathetic: Flag | None = None
    hold_s: NonNeg | None = None
    rule: Text | None = None  # the rule that made it where its entity does not say (Finding.rule)
    # A wave candidate's copy for every job-stage member's fleet index (diagnosis/engine/fleet_waves.py):
    # noted there, never judged as the job's finding.
    wave_copy: Flag | None = None


class SummaryWatermark(Payload, frozen=True):
    """``summary``/``watermark``: how far one node-stage member has got in event time (null:
    nothing yet); ``reads``: its telemetry partitions (``"topic:partition"``) of ``of`` in all."""

    member: Text | None = None
    watermark: Number | None = None
    reads: list[Text] | None = None
    of: NonNegInt | None = None
    behind: Flag | None = None
    idle: Flag | None = None
    done: Flag | None = None  # its last word, as it stopped because its input ended


class SummaryClock(Payload, frozen=True):
    """``summary``/``clock``: how far each job one node-stage member reads has delivered in event
    time (job → its latest event time handed on), sent to every partition: a job-stage member learns
    the clocks of the jobs other members hold (diagnosis/engine/time_base.py, clock mates)."""

    jobs: dict[Text, Number]


class SummaryBundle(Payload, frozen=True):
    """``summary``/``bundle``: job-level events one node-stage batch passes on. Each is an envelope
    judged on its own (events/bundle.py ``decode_bundled``: a bad one is a dead letter alone, its
    neighbours go on), so here only the list is checked."""

    events: list[Any] | None = None
