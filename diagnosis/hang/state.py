"""What the hang detector (diagnosis.hang.detector) is configured with and keeps per job: the step and
heartbeat bookkeeping that tells a stall, and the open stall with the dumps collected for it.

Its own module so that the detector (diagnosis.hang.detector) and its verdicts (diagnosis.hang.verdict)
share one definition of that state.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from faultlens.diagnosis.hang.saving import Save
from faultlens.diagnosis.peers.features import NodeWindow
from faultlens.diagnosis.rules.liveness import GRACE_S
from faultlens.diagnosis.stacks.dump_set import DumpSet
from faultlens.diagnosis.stacks.outliers import StackConfig


@dataclass(frozen=True, slots=True)
class HangConfig:
    k: float = 5.0  # stall threshold in median step times
    floor_s: float = 60.0  # never call a stall shorter than this a hang
    heartbeat_fresh_s: float = 60.0  # a beat listing pids this recent means the processes live
    # Nothing of the job reached diagnosis for this long: its whole telemetry stopped (the job's or
    # the pipeline's silence, liveness' telemetry_lost at its default grace), and no hang is told
    # from it. Not --silence-grace: that delays the report of a silence, while this must stay well
    # under the 60 s floor and beat freshness, or a stream stopped just after the last step reads
    # as a stall with live processes (quiet 120 s: a suspicion 62 s after the last step, where 30 s
    # gives none; tests/diagnosis/test_m1_hang_quiet_and_silence_grace.py).
    quiet_s: float = GRACE_S
    collect_timeout_s: float = 30.0  # event time to wait for every rank's dump
    # Every rank dumped, but some only by faulthandler, or some ranks' Flight Recorder dumps are
    # still out while others' are in: wait this long for the rest.
    pyspy_grace_s: float = 5.0
    storage_lookback_s: float = 300.0  # a storage alert this long before a stall's onset still explains it
    # A stall whose stacks show a checkpoint save under way (diagnosis.hang.saving) is let go for this
    # long unless the job steps; still no step then is an alert (the save stuck, or its storage).
    writing_patience_s: float = 900.0
    suspicion_confidence: float = 0.6
    fallback_confidence: float = 0.35  # blame without stacks: the first rank to stop
    # GPU-side evidence: a node whose least busy GPU runs at most this share of the peers' (median)
    # utilisation, while the peers are at least ``busy_util`` busy, is idle while they spin.
    idle_share: float = 0.3
    busy_util: float = 50.0
    gpu_confidence: float = 0.65
    nccl_confidence: float = 0.6
    corroboration: float = 0.1  # added when another cue names the same nodes
    # A minority of nodes whose agents find no training process: named for stop-time checks, not evicted.
    trainer_gone_confidence: float = 0.6
    # The weakest evidence (ranks that sent no stack, cues without stacks) evicts only at a second
    # capture this long after the first verdict, and corroborated (diagnosis.hang.weak_evidence).
    relook_s: float = 60.0
    gpu_fault_lookback_s: float = 600.0  # a GPU fault this long before the stall's onset still corroborates
    step_window: int = 512  # recent step times the median is taken over
    # Healthy jobs pause every rank together (checkpoint saves, evaluation passes): a stall must
    # also outlast this multiple of the longest gap between progress seen in the recent past.
    gap_margin: float = 2.0
    # Besides the recent gaps, the job's long pauses (gaps the margin would raise the threshold
    # for) are kept this long in event time after each ended, however many steps lie between:
    # checkpoint and evaluation intervals are hundreds to thousands of steps, and a pause every
    # 100+ steps had left the recent gaps before it recurred. A window, not for ever: a pause taken
    # once (a compile of a new shape, a first evaluation) stops widening the margin hours later.
    # Counted back from the job's latest progress, never the wall clock: the same live and replayed.
    # 6 h: twice a 1,000-step interval at 10 s a step.
    pause_window_s: float = 6 * 3600.0
    # A restarted job may take this long to its first step (checkpoint load, NCCL set-up at
    # scale); a restart still short of it by then, with its processes alive, is hung too.
    startup_s: float = 600.0
    evidence_limit: int = 256
    stacks: StackConfig = field(default_factory=StackConfig)


@dataclass
class Stall:
    """One stall of a job: the suspicion raised for it and the dumps collected since."""

    suspicion_id: str
    onset: float  # the last step progress
    opened: float  # when the suspicion was raised
    first_stopped: tuple[int, ...]
    dumps: DumpSet = field(default_factory=DumpSet)
    complete_at: float | None = None  # every rank has a dump, some only the trainer's faulthandler one
    decided: bool = False
    failed: set[int] = field(default_factory=set)  # ranks whose capture failed (py-spy missing, ptrace denied)
    inconclusive: bool = False  # decided without naming a culprit: later evidence may revisit it
    held: bool = False  # its verdict fell due while the job's telemetry was stopped (logged once)
    look: int = 1  # which capture of the stall is collected (diagnosis.hang.weak_evidence)
    named: tuple[str, ...] = ()  # the machines the first look's weak evidence named
    relook_at: float | None = None  # when the second capture is asked for


@dataclass
class JobState:
    """One job as the hang detector follows it: each rank's last step, the pace, the last beat."""

    last_step: dict[int, tuple[int, float, str]] = field(default_factory=dict)  # rank → (step, ts, event id)
    rank_node: dict[int, str] = field(default_factory=dict)
    step_times: deque[float] = field(default_factory=deque)
    last_progress: float | None = None
    started: float | None = None  # when the job last restarted: its first step is awaited from then
    last_beat: float | None = None
    # The latest event time of anything of the job that reached the detector (beats, steps,
    # watchdogs, net samples, dumps, windows): the job's telemetry flowed until then.
    heard: float | None = None
    resumed: float | None = None  # when its telemetry came back after nothing arrived for a grace
    # Recent gaps between the job's progress: each new highest step's first arrival (or a restart's
    # lower step's) after the last progress of any rank. Not each rank's arrival: in a job of more
    # than 64 ranks those near-zero gaps pushed out the one long one (a checkpoint or evaluation
    # pause) at the very next step, and every recurrence of the pause read as a hang.
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    # The job's long pauses within HangConfig.pause_window_s, as (when it ended, how long), each
    # shorter than every one before it: a pause both older and no longer than a later one never
    # sets the margin, so it is dropped when the later one comes. Bounded by the window: at most
    # one pause per floor / gap_margin of event time.
    pauses: deque[tuple[float, float]] = field(default_factory=deque)
    top_step: int | None = None  # the job's highest step since it last went back (a restart)
    stall: Stall | None = None
    # Dumps since the last progress, before any suspicion: in a trace (or a capture someone else
    # asked for) they may precede our own tick by a moment, and belong to the stall all the same.
    recent: DumpSet = field(default_factory=DumpSet)
    recent_failed: set[int] = field(default_factory=set)  # failed captures since the last progress, before a suspicion
    windows: dict[str, NodeWindow] = field(default_factory=dict)  # node → its latest NodeWindow
    progress: dict[int, tuple[int, str]] = field(default_factory=dict)  # rank → (last completed collective, event id), from watchdogs
    watchdog_first: float | None = None  # when the first watchdog report since the last progress arrived
    no_pids: dict[str, tuple[float, str]] = field(default_factory=dict)  # node → (ts, event id) of its first beat listing no trainer pid, while so
    with_pids: set[str] = field(default_factory=set)  # nodes whose beats once listed a trainer pid
    ended_at: float | None = None  # the launcher's job/end, until a later step
    writing_until: float | None = None  # a save was under way: no new suspicion before, unless it steps
    writing_onset: float | None = None  # the onset of the stall a save was seen in (its second look alerts)
    writing_save: Save | None = None  # what that save's stacks showed
    # The job's storage alerts (a shared filer that stopped answering), the latest few: a rank hung
    # writing its checkpoint to it is no evidence against its own machine (diagnosis.hang.verdict).
    storage: deque = field(default_factory=lambda: deque(maxlen=8))
    # node → (ts, id, what) of the first GPU fault diagnosis on it (an Xid): corroborates a hang's
    # weak evidence against that node (diagnosis.hang.weak_evidence).
    gpu_faults: dict[str, tuple[float, str, str]] = field(default_factory=dict)

