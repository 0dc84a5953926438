"""EventClock.place_records (one pass a record: read, learn, place) against the intake's placing as it was
before (each record's (job, node, ts, record_ts) read into a list, observe_many of the list, then moved()
where a job is judged or a stamp is from the future): the same places, moves and clock, batch by batch."""

from __future__ import annotations

import random
from types import SimpleNamespace

from faultlens.events.event_clock import EventClock


def _old_place(clock: EventClock, records, wall: float) -> int:
    """The intake's _place before place_records (streams/intake.py, 2bcd1efc), its count of moves returned."""
    placed, keyed = [], []
    for r in records:
        value, timestamp_ms = r.value, r.timestamp_ms
        record_ts = timestamp_ms / 1000.0 if timestamp_ms and timestamp_ms > 0 else None
        try:
            ts, job, node = value.ts, value.job, value.node
        except AttributeError:
            ts, job, node = getattr(value, "ts", None), getattr(value, "job", ""), getattr(value, "node", "")
        if type(ts) is not float:
            ts = float(ts) if isinstance(ts, (int, float)) else None
        if ts is None:
            r.event_ts = record_ts if record_ts is not None else wall
            continue
        if type(job) is not str or type(node) is not str:
            job, node = str(job), str(node)
        r.event_ts = ts
        placed.append(r)
        keyed.append((job, node, ts, record_ts))
    clock.observe_many(keyed, wall)
    if not keyed:
        return 0
    judges = {job: clock.judges(job) for job in {k[0] for k in keyed}}
    limit = clock.max_skew_s
    if not any(judges.values()) and max(k[2] for k in keyed) <= wall + limit:
        return 0
    moved = 0
    for r, (job, node, ts, record_ts) in zip(placed, keyed, strict=True):
        if not judges[job] and ts <= (wall if record_ts is None or wall >= record_ts else record_ts) + limit:
            continue
        at = clock.moved(job, node, ts, record_ts, wall)
        if at is not None:
            moved += 1
            r.event_ts, r.skew_s, r.clamped = at.ts, at.skew_s, at.clamped
    return moved


def _record(value, timestamp_ms):
    return SimpleNamespace(value=value, timestamp_ms=timestamp_ms, event_ts=None, skew_s=None, clamped=None)


def _batches(seed: int, live: bool):
    rng = random.Random(seed)
    jobs = [f"j{i}" for i in range(rng.randint(1, 3))]
    nodes = {j: [f"n{k}" for k in range(rng.randint(2, 6))] for j in jobs}
    skew = {(j, n): rng.choice([0.0, 0.0, 0.0, 1000.0, -700.0, 200.0]) for j in jobs for n in nodes[j]}
    wall = 1_700_000_000.0
    for _ in range(rng.randint(5, 40)):
        wall += rng.uniform(1, 20) if live else rng.uniform(0.01, 0.1)
        batch = []
        for _ in range(rng.randint(0, 60)):
            j = rng.choice(jobs)
            n = rng.choice(nodes[j])
            sent = wall - rng.uniform(0, 2) if live else wall - rng.uniform(0, 3000)
            ts = sent + skew[(j, n)] + rng.gauss(0, 0.5)
            roll = rng.random()
            if roll < 0.03:
                ts = ts + rng.choice([400.0, 5000.0, -5000.0])  # from the future, or far off its node
            elif roll < 0.05:
                ts = int(ts)
            elif roll < 0.06:
                ts = None
            elif roll < 0.07:
                ts = "soon"
            job = j if rng.random() > 0.02 else 7
            value = SimpleNamespace(ts=ts, job=job, node=n)
            if rng.random() < 0.02:
                value = SimpleNamespace(ts=ts)  # no job, no node
            stamp = rng.choice([None, 0, -5]) if rng.random() < 0.05 else int(sent * 1000)
            batch.append((value, stamp))
        yield wall, batch


def _state(clock: EventClock):
    return (clock.skewed_nodes, dict(clock._job_offset), dict(clock._job_drift),
            {k: (list(e.recent), e.median, e.fresh, e.correction) for k, e in clock._nodes.items()},
            {j: clock.judges(j) for j in clock._job_nodes})


def test_place_records_as_the_old_placing():
    moves = judged = 0
    for seed in range(300):
        for judge_peers in (True, False):
            live = seed % 3 != 0
            old, new = EventClock(judge_peers=judge_peers), EventClock(judge_peers=judge_peers)
            for wall, batch in _batches(seed, live):
                a = [_record(v, t) for v, t in batch]
                b = [_record(v, t) for v, t in batch]
                moved_old = _old_place(old, a, wall)
                assert new.place_records(b, wall) == moved_old, seed
                assert [(r.event_ts, r.skew_s, r.clamped) for r in a] == [(r.event_ts, r.skew_s, r.clamped) for r in b], seed
                moves += moved_old
            assert _state(old) == _state(new), seed
            judged += any(_state(new)[-1].values())
    assert moves > 100 and judged > 50  # clocks judged and events moved, not only the quiet path
