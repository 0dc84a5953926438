"""What a fail-slow campaign (diagnosis.peers.failslow) holds: its configuration, the rounds of stack
dumps it is collecting, what each closed round found, and the campaign itself per job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from faultlens.diagnosis.peers.anomaly import CORROBORATED
from faultlens.diagnosis.peers.slow_evidence import SlowEvidenceConfig
from faultlens.diagnosis.stacks.dump_set import DumpSet
from faultlens.diagnosis.stacks.outliers import StackConfig
from faultlens.events.diagnosis_record import Diagnosis


@dataclass(frozen=True, slots=True)
class FailSlowConfig:
    rounds: int = 5
    round_window_s: float = 10.0  # request spacing, and the span of a round without a request id
    persist_share: float = 0.6  # a rank (group) must be an outlier in this share of rounds
    min_rounds: int = 3  # rounds enough to conclude when the campaign times out
    min_round_share: float = 0.5  # a round needs dumps from this share of the ranks to count
    no_rounds_timeout_s: float = 60.0  # no dump at all by then: the suspicion is judged on its own
    # Without stacks a suspicion evicts only with a second independent signal (a hardware drift
    # beside the slowdown, diagnosis.peers.anomaly.CORROBORATED); otherwise it is an alert for a person.
    stand_confidence: float = CORROBORATED
    campaign_timeout_s: float = 150.0
    request_confidence: float = 0.3
    cooldown_s: float = 300.0  # after a conclusion, suspicions of the same machines are folded
    evidence_limit: int = 256
    stacks: StackConfig = field(default_factory=StackConfig)
    evidence: SlowEvidenceConfig = field(default_factory=SlowEvidenceConfig)


@dataclass
class Round:
    key: str
    dumps: DumpSet = field(default_factory=DumpSet)


@dataclass(frozen=True, slots=True)
class RoundResult:
    key: str
    ts: float
    outliers: tuple[int, ...]
    groups: dict[str, int]  # "pp:3" → outlier count in that group
    evidence: tuple[str, ...]
    seen: frozenset[int] = frozenset()  # ranks whose stacks the round had


@dataclass
class Campaign:
    started: float
    suspicion: Diagnosis | None = None
    open: dict[str, Round] = field(default_factory=dict)
    done: list[RoundResult] = field(default_factory=list)
    requested: int = 0
    last_request: float | None = None
    dumps_seen: int = 0
    closed: set[str] = field(default_factory=set)  # request ids already judged: stragglers are dropped
