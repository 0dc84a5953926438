"""What an engine is told when it is built (diagnosis/engine/core.py): windows, time, lateness, which
stage it runs, the models and catalogues it uses. Frozen: a consumer that learns the broker's
partition count replaces it (``Engine.telemetry_partitions``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from faultlens.diagnosis.engine.implicit import ImplicitConfig
from faultlens.diagnosis.engine.thresholds import Thresholds
from faultlens.diagnosis.rules.liveness import GRACE_S
from faultlens.events.topics import TELEMETRY_PARTITIONS
from faultlens.parsing.rules import LineRule


@dataclass(frozen=True)
class EngineConfig:
    window_s: float = 10.0  # feature window of the peer comparison
    tick_every_s: float = 1.0  # event-time cadence of the absence detectors
    # Seconds a job may deliver nothing before its time moves: of the time of jobs on its clock, or
    # live, of wall time once nothing on its clock arrives (diagnosis/engine/time_base.py).
    grace_s: float = 30.0
    # Event seconds a node may report nothing (beats, steps) while its peers report on before it is
    # node_silent, and a whole job before it is telemetry_lost (diagnosis/rules/liveness.py): a
    # judgement of the machines, where grace_s is one of the pipeline's time; a flag each.
    silence_grace_s: float = GRACE_S
    # Event seconds a quiet job's time moves per wall second past the grace: 1, the wall clock's own
    # pace. Tests that wait for a quiet job's verdicts (a stream that ended, silences) set more, so
    # 30 s of silence pass in a few wall seconds; the verdicts are the same (a tick moves time by
    # whatever elapsed, as a late tick on a loaded machine does).
    wall_rate: float = 1.0
    max_lateness_s: float = 900.0  # a telemetry sample this far behind its job's time is not judged
    implicit: bool = True  # hang / fail-slow localisation (diagnosis.engine.implicit)
    implicit_config: ImplicitConfig = field(default_factory=ImplicitConfig)
    seen_ids: int = 200_000  # redelivered events (at-least-once) are recognised by id
    skew_alert_every_s: float = 3600.0  # one clock_skew alert per node per this much event time
    # "all": parse and run the node rules here too; "job": a node stage upstream did (its findings,
    # windows and forwarded events arrive on `summaries`), so events go straight to the job stage.
    stage: str = "all"
    # The peer model (isolation forest + slow-drift suspects, diagnosis.peers.anomaly); off: rules only.
    peer_model: bool = True
    # The log-line catalogue raw lines are parsed with (parsing.rules.load: shipped + --rules files);
    # None: the shipped one.
    line_rules: tuple[LineRule, ...] | None = None
    # How many partitions the telemetry topics have: nodes that share one fall silent together when
    # it stops (diagnosis/rules/liveness.py). A consumer sets the broker's count; offline, the default
    # layout's (events/topics.py), so `analyze` judges a trace as the default deployment would.
    telemetry_partitions: int = TELEMETRY_PARTITIONS
    # Waves and debounce (diagnosis/engine/thresholds.toml, with a user's --thresholds file over it); None: shipped.
    thresholds: Thresholds | None = None
