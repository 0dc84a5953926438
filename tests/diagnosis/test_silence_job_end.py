"""A job that ends: its trainers exit, then the scheduler stops its node agents one node at a time.

The first agent stopped, judged against the peers still beating, was evicted as a dead machine,
and the job's end, its last steps long past while the last pid-listing beats were still fresh, was
suspected as a hang and reattempted (tests/fixtures/foreign/job_ends_staggered.jsonl). A node's
agent that said the work on it was over (no training process in its last beat, or ``stopping``)
went quiet on purpose; a dead machine says neither."""

from __future__ import annotations

import random

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.rules.liveness import SilenceDetector
from tests.diagnosis.diag_events import T0, beat, ev, nodes, step, topology

EVERY = 5.0  # the agents' beat interval (collect's default is 5 s)


def _job_end(names: list[str], *, trainers_exit: float, agents_stop: dict[str, float], pids_after_exit: bool = False,
             seed: int = 1, last_words: dict[str, dict] | None = None):
    """Phased beats listing the trainer until ``trainers_exit``, none after (unless ``pids_after_exit``),
    each agent's last beat before its stop; ``last_words``: extra data of the node's final beat."""
    rng = random.Random(seed)
    out = []
    for n in names:
        t = rng.uniform(0, EVERY)
        beats = []
        while t < agents_stop[n]:
            beats.append(t)
            t += EVERY
        for i, at in enumerate(beats):
            working = at < trainers_exit or pids_after_exit
            extra = (last_words or {}).get(n, {}) if i == len(beats) - 1 else {}
            out.append(beat(at, n, pids=[4000] if working else [], **extra))
    return sorted(out, key=lambda e: e.ts)


def _run(events, until: float, grace_s: float = 30.0) -> list:
    det = SilenceDetector(grace_s=grace_s)
    found, t = [], 0.0
    for e in events:
        while T0 + t < e.ts:  # tick as a live stage does, one second at a time
            found += det.tick(T0 + t)
            t += 1.0
        det.observe(e)
    while t <= until:
        found += det.tick(T0 + t)
        t += 1.0
    return found


STAGGER = {n: 626.0 + 20.0 * i for i, n in enumerate(nodes(8))}  # 140 s from the first stop to the last


def test_agents_stopped_one_by_one_after_the_trainers_exited_evict_nobody():
    found = _run(_job_end(nodes(8), trainers_exit=620, agents_stop=STAGGER), until=850)
    assert [d for d in found if d.action in ("evict", "alert")] == []
    [end] = [d for d in found if d.fault == "telemetry_lost"]
    assert end.action == "none" and "the job ended" in end.detail


def test_the_same_stops_with_the_trainers_still_listed_are_judged_as_before():
    """The control: agents that stop while their beats still list the trainer are machines that
    went quiet mid-job, and the first is judged on its peers' word."""
    found = _run(_job_end(nodes(8), trainers_exit=10_000, agents_stop=STAGGER), until=850)
    assert ("node_silent", ("n000",)) in [(d.fault, d.nodes) for d in found if d.action == "evict"]


def test_a_dead_machine_whose_agent_never_listed_pids_is_still_evicted():
    """Beats without training pids from the start (an agent that does not look for processes) say
    nothing of a job's end: a node among them that stops while its peers beat on is silent."""
    stops = {n: 600.0 for n in nodes(8)}
    stops["n003"] = 300.0
    found = _run(_job_end(nodes(8), trainers_exit=0, agents_stop=stops), until=400)
    assert [(d.fault, d.nodes) for d in found if d.action == "evict"] == [("node_silent", ("n003",))]


def test_an_agent_stopped_on_purpose_is_never_silent():
    """``stopping``: the agent's last beat on a deliberate stop. While its trainer runs the node is
    unwatched (one alert); after the trainer exited, nothing to say."""
    stops = {n: 600.0 for n in nodes(8)}
    stops["n002"] = stops["n005"] = 300.0
    events = _job_end(nodes(8), trainers_exit=10_000, agents_stop=stops,
                      last_words={"n002": {"stopping": True}, "n005": {"stopping": True}})
    events = [e if not (e.node == "n005" and e.data.get("stopping")) else beat(e.ts - T0, "n005", pids=[], stopping=True)
              for e in events]
    found = _run(events, until=500)
    assert [d for d in found if d.action == "evict"] == []
    [alert] = [d for d in found if d.action == "alert"]
    assert (alert.fault, alert.nodes, alert.entity) == ("node_silent", ("n002",), "agent")
    assert "stopped" in alert.detail and "unwatched" in alert.detail


def _job_with_steps(pids_at_end: list[int]) -> list:
    """8 nodes, one rank each, stepping every 10 s until 400 s; beats every 5 s until 520 s, listing
    ``pids_at_end`` from 410 s on (the trainers exited after their last step, or hang in it)."""
    e = Engine(EngineConfig(grace_s=30))
    e.process(topology(n=8, gpus=1, tp=1, pp=1))
    events = [step(t, n, r, int(t // 10)) for t in range(10, 401, 10) for r, n in enumerate(nodes(8))]
    events += [beat(t + 0.1 * r, n, pids=[4000] if t < 410 else pids_at_end)
               for t in range(0, 521, 5) for r, n in enumerate(nodes(8))]
    found = []
    for event in sorted(events, key=lambda x: x.ts):
        found += e.process(event)
    return found


def test_a_job_whose_trainers_all_exited_is_not_suspected_of_a_hang():
    assert [d for d in _job_with_steps([]) if d.fault == "job_hang"] == []


def test_a_job_whose_trainers_live_on_without_steps_is_suspected():
    """The control: the same stop with every trainer still alive is a hang."""
    assert [d.action for d in _job_with_steps([4000]) if d.fault == "job_hang"][:1] == ["capture_stacks"]


def test_a_node_that_died_while_the_job_was_down_is_judged_once_the_job_trains_again():
    """Every trainer exited (a crash), n004 lost power before the restart, the job trains again on
    the others 40 s later: n004's last beat listed no trainer, but the job went on without it."""
    names = nodes(8)
    out = []
    for r, n in enumerate(names):
        t = 0.3 * r
        while t < 600:
            down = 300 <= t < 340
            if not (n == "n004" and t >= 320):
                out.append(beat(t, n, pids=[] if down else [4000]))
            t += EVERY
    found = _run(sorted(out, key=lambda e: e.ts), until=600)
    assert [(d.fault, d.nodes) for d in found if d.action == "evict"] == [("node_silent", ("n004",))]


def _engine_run(events) -> list:
    e = Engine(EngineConfig(implicit=False, grace_s=30))
    found = e.process(topology(n=8, gpus=1, tp=1, pp=1))
    for event in sorted(events, key=lambda x: x.ts):
        found += e.process(event)
    return found


def _launcher_end(at: float, reason: str):
    return ev(at, "-", "job", "end", reason=reason, attempt=0, command_id=None, nodes=nodes(8))


def test_the_launchers_end_mutes_silence_even_where_no_beat_says_the_trainer_exited():
    """Agents killed with their trainers (no pid-less beat) one node at a time, after the launcher
    published the job's ``end``: nobody is judged. The same stops without it evict the first
    (test_the_same_stops_with_the_trainers_still_listed_are_judged_as_before)."""
    beats = _job_end(nodes(8), trainers_exit=10_000, agents_stop=STAGGER)
    without = _engine_run(beats)
    assert ("n000",) in [d.nodes for d in without if d.action == "evict"]
    found = _engine_run([*beats, _launcher_end(615.0, "cancelled")])
    assert [d for d in found if d.action in ("evict", "alert")] == []


def test_a_job_that_gave_up_still_has_its_silence_judged():
    """``gave_up``: the launcher ran out of restarts, perhaps because a machine died; its silence
    is judged as before."""
    found = _engine_run([*_job_end(nodes(8), trainers_exit=10_000, agents_stop=STAGGER), _launcher_end(615.0, "gave_up")])
    assert ("n000",) in [d.nodes for d in found if d.action == "evict"]


def test_a_real_agents_beats_at_a_real_jobs_end_read_as_the_end():
    """The beats a real agent sent on an H100 (tests/fixtures/real_gpu/job_end_beats.json): the
    trainer's pids while it ran, none after it exited, then the stop's last word."""
    import json
    from pathlib import Path

    rec = json.loads((Path(__file__).parents[1] / "fixtures" / "real_gpu" / "job_end_beats.json").read_text())
    rows = rec["rows"]
    assert rows[0]["pids"] and not rows[-2]["pids"] and rows[-1]["stopping"]
    det = SilenceDetector(grace_s=30)
    for r in rows:
        det.observe(beat(r["t"], "n000", pids=r["pids"], **({"stopping": True} if r["stopping"] else {})))
    # A second node beats on for two minutes past the first's stop: the first is still no silence.
    for t in range(0, 200, 5):
        det.observe(beat(float(t), "n001", pids=[4000]))
    found = [f for t in range(30, 200) for f in det.tick(T0 + t)]
    assert [f for f in found if f.action in ("evict", "alert")] == []
