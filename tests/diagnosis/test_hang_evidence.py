"""The weakest evictions of a hang (diagnosis.hang.weak_evidence): ranks that sent no stack while the
others agree, and the cues without stacks, evict only at a second capture that names the same
machines, corroborated from outside the capture (heartbeats without the trainer, a GPU fault, the
NCCL watchdog). Healthy machines these paths named before, and the true cases they must still catch.

Timeline of every test: steps every 2 s to t=40; the suspicion at t≈101; the first capture's dumps
at t=105, its verdict when the job's beat at t=140 says they are missing; the second capture asked
at t=200, its dumps at t=205, its verdict at the beat of t=230.
"""

from __future__ import annotations

from bench.testbed.stack_samples import JOB, T0, beat_event, event, fig7_dumps, grid, run_detector, stack_event, step_event
from faultlens.diagnosis.engine.detector import JobBook
from faultlens.diagnosis.engine.implicit import ImplicitConfig, ImplicitFaultDetector
from faultlens.diagnosis.hang.detector import HangConfig
from faultlens.diagnosis.peers.features import NodeWindow
from faultlens.events.diagnosis_record import Diagnosis

TOPO = grid(16, 2, tp=2, pp=4, dp=4)
STUCK = 7
NODE = TOPO.by_rank[12].node  # ranks 12, 13: tp group 6
SILENT = TOPO.group_ranks("tp", 6)
FIRST, SECOND = 105.0, 205.0  # the two captures' dumps


def _detector():
    book = JobBook()
    book.update(TOPO.to_event(JOB, T0))
    return ImplicitFaultDetector(book, ImplicitConfig(hang=HangConfig(collect_timeout_s=30.0, relook_s=60.0)))


def _training(beats_until: float = 400.0, no_pids: str | None = None, from_ts: float = 1e9):
    events = [step_event(2.0 * n + 0.001 * r, TOPO, r, n) for n in range(1, 21) for r in range(32)]
    events += [
        beat_event(t, node, pids=[] if node == no_pids and t >= from_ts else None)
        for t in range(0, int(beats_until) + 1, 10)
        for node in TOPO.nodes
    ]
    return events


def _dumps(at: float, silent=SILENT):
    text = fig7_dumps(TOPO, STUCK)[0]  # every answering rank in the same collective
    return [stack_event(at + 0.01 * r, TOPO, r, text) for r in range(32) if r not in silent]


def _watchdog(quiet=(), behind=(), at: float = 100.0):
    """ProcessGroupNCCL watchdogs: ``behind`` completed 499, the rest 500; ``quiet`` never fired."""
    return [
        event(
            at + 0.01 * r,
            TOPO.by_rank[r].node,
            "nccl",
            "nccl_timeout",
            rank=r,
            seq=501,
            last_enqueued=501,
            last_completed=499 if r in behind else 500,
        )
        for r in range(32)
        if r not in quiet
    ]


def _windows(at: float, idle: set[str]):
    return [
        NodeWindow(
            JOB,
            n,
            T0 + at,
            {
                "util_min": 0.0 if n in idle else 100.0,
                "util": 0.0 if n in idle else 100.0,
                "power_ratio": 0.1 if n in idle else 0.35,
            },
            10,
        )
        for n in TOPO.nodes
    ]


def _run(events, windows=(), diagnoses=(), until=300):
    det = _detector()
    out, shown = [], sorted(windows, key=lambda w: w.start)
    for t in range(0, until + 1, 1):  # the windows reach the detector as the engine's do, in time
        due = [w for w in shown if w.start <= T0 + t]
        shown = shown[len(due) :]
        for w in due:
            out += det.observe_window(w)
        out += run_detector(
            det,
            [e for e in events if T0 + t - 1 < e.ts <= T0 + t],
            start=t,
            until=t,
            diagnoses=[d for d in diagnoses if T0 + t - 1 < d.ts <= T0 + t],
        )
    return out


def _verdicts(out):
    return [d for d in out if d.action != "capture_stacks"]


def _gpu_lost(node: str, at: float = 95.0) -> Diagnosis:
    return Diagnosis(
        job=JOB,
        ts=T0 + at,
        onset=T0 + at,
        fault="gpu_lost",
        action="evict",
        nodes=(node,),
        detail="Xid 79: GPU has fallen off the bus",
    )


# --- healthy machines the weak paths named before ------------------------------------------------
def test_a_node_whose_pyspy_cannot_attach_is_asked_again_and_never_evicted():
    # No SYS_PTRACE in its container: its agent sends nothing, its beats list the trainer, the job
    # hangs elsewhere. Both captures miss its ranks; nothing outside the capture names it.
    out = _run(_training() + _dumps(FIRST) + _dumps(SECOND))
    assert [d.action for d in out] == ["capture_stacks", "alert", "capture_stacks", "alert"]
    first, asked, second = out[1], out[2], out[3]
    assert first.nodes == (NODE,) and "no eviction: one capture is no evidence" in first.detail
    assert "capturing every rank's stack again in 60s" in first.detail and first.confidence <= 0.35
    assert asked.id.endswith(".look2") and asked.ts == first.ts + 60.0
    assert "nothing outside it corroborates" in second.detail and second.nodes == (NODE,)


def test_a_dump_lost_in_transit_is_answered_by_the_second_capture():
    # The agent restarted while sending: the second capture has every rank, all in one collective.
    out = _run(_training() + _dumps(FIRST) + _dumps(SECOND, silent=()))
    actions = [d.action for d in _verdicts(out)]
    assert actions == ["alert", "stop_time_diagnosis"]


def test_a_data_loader_stall_with_one_node_idle_first_evicts_nobody():
    # Every rank waits on storage in its data loader; one node's GPUs went idle a window before the others.
    early = _windows(110.0, {NODE}) + _windows(120.0, {NODE})
    late = [w for t in (150.0, 160.0, 170.0, 180.0, 190.0, 210.0, 220.0) for w in _windows(t, set(TOPO.nodes))]
    out = _run(_training(), windows=early + late)
    verdicts = _verdicts(out)
    assert verdicts and verdicts[0].action == "alert" and verdicts[0].nodes == (NODE,)
    assert not [d for d in out if d.action == "evict"]


def test_ranks_behind_because_they_wait_on_the_hung_machine_are_not_evicted():
    # The truly hung rank is on n003 (rank 7, no dump from anyone); machine NODE's ranks wait on it
    # and their watchdogs show one collective fewer. The watchdog alone, at both looks, evicts nobody.
    out = _run(_training() + _watchdog(behind=SILENT))
    verdicts = _verdicts(out)
    assert [d.action for d in verdicts] == ["alert", "alert"] and all(d.nodes == (NODE,) for d in verdicts)
    assert "NCCL watchdog" in verdicts[1].detail and "nothing outside it corroborates" in verdicts[1].detail


def test_a_second_capture_that_names_another_machine_evicts_nobody():
    other = TOPO.group_ranks("tp", 2)
    out = _run(_training() + _dumps(FIRST) + _dumps(SECOND, silent=other) + _watchdog(quiet=other))
    verdicts = _verdicts(out)
    assert [d.action for d in verdicts] == ["alert", "alert"]
    assert "the second capture names other machines" in verdicts[1].detail


# --- true cases the weak paths still catch -------------------------------------------------------
def test_a_gpu_that_fell_off_is_evicted_at_the_second_capture():
    # Xid 79 on NODE: its ranks can send no dump at either capture; the node stage's gpu_lost corroborates.
    out = _run(_training() + _dumps(FIRST) + _dumps(SECOND), diagnoses=[_gpu_lost(NODE)])
    verdicts = _verdicts(out)
    assert [d.action for d in verdicts] == ["alert", "evict"]
    evict = verdicts[1]
    assert evict.nodes == (NODE,) and evict.ranks == SILENT and evict.group == "tp:6"
    assert "corroborated by gpu fault" in evict.detail and "Xid 79" in evict.detail
    assert evict.ts == T0 + 230.0


def test_ranks_stuck_in_a_cuda_call_without_a_dump_are_evicted_when_the_watchdog_names_them():
    # Their py-spy hangs on the stuck process (no dump, no failure); the other ranks' watchdogs fire
    # in the next collective, theirs never does: the last to log.
    out = _run(_training() + _dumps(FIRST) + _dumps(SECOND) + _watchdog(quiet=SILENT))
    verdicts = _verdicts(out)
    assert [d.action for d in verdicts] == ["alert", "evict"] and verdicts[1].nodes == (NODE,)
    assert "corroborated by watchdog" in verdicts[1].detail


def test_a_node_whose_trainer_is_gone_from_its_beats_corroborates_its_silence():
    out = _run(_training(no_pids=NODE, from_ts=150.0) + _dumps(FIRST) + _dumps(SECOND))
    verdicts = _verdicts(out)
    assert [d.action for d in verdicts] == ["alert", "evict"] and "corroborated by beats" in verdicts[1].detail


def test_without_stacks_idle_gpus_and_the_watchdog_on_one_machine_evict_at_the_second_look():
    windows = [w for t in range(110, 230, 10) for w in _windows(float(t), {NODE})]
    out = _run(_training() + _watchdog(quiet=SILENT), windows=windows)
    verdicts = _verdicts(out)
    assert [d.action for d in verdicts] == ["alert", "evict"] and verdicts[1].nodes == (NODE,)
    assert "idle" in verdicts[1].detail and "never reported" in verdicts[1].detail


def test_the_gpu_fault_must_be_on_the_silent_machine():
    elsewhere = TOPO.by_rank[0].node
    out = _run(_training() + _dumps(FIRST) + _dumps(SECOND), diagnoses=[_gpu_lost(elsewhere)])
    assert not [d for d in out if d.action == "evict"]


def test_no_second_capture_once_every_trainer_is_gone():
    # The job ended (every agent lists no training process) before the second look was due.
    events = _training() + _dumps(FIRST)
    events = [e for e in events if not (e.kind == "beat" and e.ts >= T0 + 150.0)]
    events += [beat_event(t, node, pids=[]) for t in range(150, 401, 10) for node in TOPO.nodes]
    out = _run(events)
    assert [d.action for d in out] == ["capture_stacks", "alert"]


def test_idle_gpus_still_apart_at_the_second_look_evict_unless_the_storage_is_failing():
    windows = [w for t in range(110, 230, 10) for w in _windows(float(t), {NODE})]
    out = _run(_training(), windows=windows)
    assert [d.action for d in _verdicts(out)] == ["alert", "evict"] and "gpu idle still" in _verdicts(out)[1].detail
    filer = Diagnosis(
        job=JOB, ts=T0 + 90.0, onset=T0 + 90.0, fault="storage", action="alert", detail="nfs: server filer01 not responding"
    )
    out = _run(_training(), windows=windows, diagnoses=[filer])
    assert [d.action for d in _verdicts(out)] == ["alert", "alert"]
    assert "nothing outside it corroborates" in _verdicts(out)[1].detail
