"""Wall time says only that a stream stopped: it never makes a detector that can evict fire.

Live, a job of which nothing arrived for a grace period of wall time has its time moved by the wall
clock (diagnosis/engine/core.py: the input's end, or the pipeline's silence). A consumer starved of
CPU, or stopped, behind its input looks the same from inside: its jobs' records are still on the
broker. What it judged on that time, it judged on time the job did not live: a wave's first
machine, released alone because the rest of the wave had not been read yet, was evicted. Here the
engine is handed the same events with the wall clock jumping while the rest are still to come (as
`faultlens diagnose` behind a backlog after the loop was away), and must give what `analyze` gives."""

from __future__ import annotations

import time

from faultlens.diagnosis.engine.core import Engine
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope
from tests.diagnosis.diag_events import beat, nodes, step, topology, xid

EVICTING = {"evict", "evict_reset_gpu", "inspect_hardware"}


def _fabric_reset() -> list[Envelope]:
    """A 16-machine job beating every second; at 100 s an NVLink fabric reset makes 8 of its
    machines log Xid 74 within 4 s (a wave: one alert, no machine evicted)."""
    events = [topology(n=16, gpus=1, tp=1, pp=1)]
    for t in range(140):
        events += [beat(t + 0.01 * i, n) for i, n in enumerate(nodes(16))]
    events += [xid(100 + 0.5 * i, f"n{i:03d}", 74, "nvlink", "evict") for i in range(8)]
    return sorted(events, key=lambda e: e.ts)


def _with_wall_jump(events: list[Envelope], after: int, wall_idle_s: float) -> list[Diagnosis]:
    """The engine given ``events[:after]``, then a wall-clock tick ``wall_idle_s`` after their
    arrival (the loop was away), then the rest; the final form of each diagnosis."""
    engine = Engine()
    found: dict[str, Diagnosis] = {}
    for e in events[:after]:
        found.update((d.id, d) for d in engine.process(e))
    found.update((d.id, d) for d in engine.tick(wall_now=time.time() + wall_idle_s))
    for e in events[after:]:
        found.update((d.id, d) for d in engine.process(e))
    found.update((d.id, d) for d in engine.flush())
    return list(found.values())


def _acting(found: list[Diagnosis]) -> set[tuple]:
    return {(str(d.fault), str(d.action), d.nodes, d.group) for d in found if str(d.action) != "none"}


def test_a_wall_clock_jump_before_the_rest_of_a_wave_is_read_evicts_no_machine():
    events = _fabric_reset()
    offline = analyze(events)
    assert _acting(offline) == {("nvlink", "alert", (), "wave:fleet-wide")}
    first_xid = next(i for i, e in enumerate(events) if e.source == "kernel")
    # 150 s of wall time with nothing read: the job's time moves 120 s past the first Xid 74, two
    # wave windows, while the other seven are still to come.
    live = _with_wall_jump(events, first_xid + 1, wall_idle_s=150.0)
    assert not [d for d in live if str(d.action) in EVICTING]
    assert _acting(live) == _acting(offline)
    # the stop itself is recorded, as the wall clock may say
    assert [(str(d.fault), str(d.action)) for d in live if d.fault == "telemetry_lost"] == [("telemetry_lost", "none")]


def _checkpoint_pause() -> list[Envelope]:
    """A 4-machine job stepping every second that pauses 50 s to write a checkpoint at 100 s (its
    processes live, its agents beat on), under the 60 s hang floor: no hang."""
    events = [topology(n=4, gpus=1, tp=1, pp=1)]
    for t in [*range(100), *range(150, 200)]:
        events += [step(t + 0.01 * i, n, rank=i, n=t, step_time_s=1.0) for i, n in enumerate(nodes(4))]
    for t in range(200):
        events += [beat(t + 0.5 + 0.01 * i, n) for i, n in enumerate(nodes(4))]
    return sorted(events, key=lambda e: e.ts)


def test_a_wall_clock_jump_during_a_checkpoint_pause_suspects_no_hang():
    events = _checkpoint_pause()
    assert not [d for d in analyze(events) if d.fault == "job_hang"]
    at_140 = next(i for i, e in enumerate(events) if e.ts - events[0].ts >= 140)
    # 55 s of wall time with nothing read: the job's time moves 25 s past its latest event (140 s),
    # 65 s past its last step, inside the grace: not a stopped stream to the hang detector.
    live = _with_wall_jump(events, at_140, wall_idle_s=55.0)
    assert not [d for d in live if d.fault == "job_hang"]


def test_a_wave_read_whole_before_its_stream_stopped_still_forms_and_ends_on_wall_time():
    """What wall time may still do for a wave: its members all read, the stream stops before the
    job's own time gets a window past the last of them; the wall clock's move joins them to the
    wave and ends it (no eviction either way), as `analyze` does at the end of the trace."""
    whole = _fabric_reset()
    events = [e for e in whole if e.ts - whole[0].ts <= 106]
    offline = analyze(events)
    engine = Engine()
    found: dict[str, Diagnosis] = {}
    for e in events:
        found.update((d.id, d) for d in engine.process(e))
    assert not [d for d in found.values() if d.group]  # the wave waits for its window
    found.update((d.id, d) for d in engine.tick(wall_now=time.time() + 150.0))
    [wave] = [d for d in found.values() if d.group]
    [off] = [d for d in offline if d.group]
    assert (wave.id, wave.count, wave.action, wave.nodes) == (off.id, off.count, off.action, ()) == (off.id, 8, "alert", ())
    assert not [d for d in found.values() if str(d.action) in EVICTING]
