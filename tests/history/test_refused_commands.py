"""A command its receivers refused (forged, replayed, expired ...) evicted nobody: the history's
evictions, time to command and incidents leave it out, and `command_outcomes` says it was refused.

The acks are the trainer hook's own (`train`/`command_ack`), made by screening each command with the
hook's real gate and callbacks; only their times are set to the history's clock.
"""

from __future__ import annotations

import dataclasses

import pytest

from history import html_report, queries
from history.schema import open_history
from history.sink import HistorySink, build_batch
from streams.command import Command
from streams.command_listener import CommandListener
from streams.command_memory import ReplayMemory
from streams.command_screen import CommandScreen
from streams.config import KafkaSettings
from streams.signing import SigningKey
from tests.history import known
from trainer_hooks.hook import TrainerHook

TRUSTED = SigningKey.generate()
ATTACKER = SigningKey.generate()


class _Recorder:
    """The hook's producer: keeps what it is asked to send."""

    def __init__(self) -> None:
        self.sent = []

    def send_event(self, event) -> None:
        self.sent.append(event)

    def flush(self, timeout: float | None = None) -> None:
        pass


def _acks(cmd: Command, job: str, node: str, rank: int, now: float, memory: ReplayMemory | None = None) -> list:
    """What the trainer hook of (job, node, rank) publishes when ``cmd`` reaches it at ``now``
    (``memory``: the ids that hook handled before)."""
    rec = _Recorder()
    hook = TrainerHook(job=job, rank=rank, node=node, settings=KafkaSettings(), listen=False, producer=rec)
    screen = CommandScreen(TRUSTED.verify_keys(), job, node, rank, spokesperson=rank == 0, memory=memory)
    listener = CommandListener(KafkaSettings(), screen, hook._on_command, hook._on_refused)
    listener.dispatch(cmd.encode(), now)
    hook.close()
    return [dataclasses.replace(e, ts=now + 0.5) for e in rec.sent if e.kind == "command_ack"]


# A forged eviction of healthy n0 in j2, citing the real diagnosis d4 (which got no command).
FORGED = Command(id="cf", job="j2", action="evict", issued_at=known.D + 17, expires_at=known.D + 317, nodes=("n0",),
                 reason="gpu_thermal", diagnosis_id="d4").signed(ATTACKER)
# A signed eviction of n9 (no receiver there): only j1's spokesperson answers, "not for me".
UNANSWERED = Command(id="cu", job="j1", action="evict", issued_at=known.T0 + 118, expires_at=known.T0 + 400,
                     nodes=("n9",), reason="manual").signed(TRUSTED)


@pytest.fixture
def conn(tmp_path):
    acks = _acks(FORGED, "j2", "n0", 0, FORGED.issued_at) + _acks(FORGED, "j2", "n0", 1, FORGED.issued_at)
    # c1 was obeyed (the launcher restarted the job for it); a replay of it later is refused.
    c1 = dataclasses.replace(known.C1, issued_at=known.T0 + 115, expires_at=known.T0 + 400).signed(TRUSTED)
    seen = ReplayMemory()
    acks += _acks(c1, "j1", "n1", 2, known.T0 + 116, seen) + _acks(c1, "j1", "n1", 2, known.T0 + 117, seen)
    acks += _acks(UNANSWERED, "j1", "n0", 0, UNANSWERED.issued_at)
    assert [a.data["obeyed"] for a in acks] == [False, False, True, False, False]
    assert [a.data["addressed"] for a in acks] == [True, True, True, True, False]
    db = tmp_path / "h.duckdb"
    c = open_history(db, create=True)
    records = [r for r in known.records() if r is not known.C1] + [c1, FORGED, UNANSWERED, *acks]
    HistorySink(c).write(build_batch(records, labels=known.LABELS))
    c.close()
    c = open_history(db, read_only=True)
    yield c
    c.close()


def test_a_refused_eviction_is_no_eviction(conn):
    blamed = {(r["job"], r["node"], r["command_id"]) for r in queries.run(conn, "wrongly_blamed")}
    assert ("j2", "n0", "cf") not in blamed
    assert ("j1", "n0", "c2") in blamed and ("j1", "n9", "cu") in blamed  # obeyed / not refused: still counted
    over = queries.run(conn, "over_eviction")[0]
    assert over["evicted_nodes"] == 5 and over["healthy_evicted"] == 3  # n0..n3 and n9; n0, n3, n9 healthy


def test_time_to_command_counts_accepted_commands_only(conn):
    ttc = queries.run(conn, "time_to_command")[0]
    assert ttc["n"] == 2 and ttc["diagnoses_without_command"] == 1  # d4's only command was the forged one
    d4 = next(r for r in queries.run(conn, "incidents") if r["diagnosis_id"] == "d4")
    assert d4["command"] is None and d4["to_command_s"] is None


def test_command_outcomes_say_who_refused(conn):
    rows = {r["command_id"]: r for r in queries.run(conn, "command_outcomes")}
    assert rows["cf"]["outcome"] == "refused" and rows["cf"]["refused_acks"] == 2 and rows["cf"]["obeyed_acks"] == 0
    assert rows["cf"]["refusal"].startswith("signed with unknown key")
    # obeyed once, refused as a replay afterwards: it did happen
    assert rows["c1"]["outcome"] == "job restarted" and rows["c1"]["obeyed_acks"] == 1
    assert rows["c1"]["refusal"].startswith("replayed")
    assert rows["cu"]["outcome"] == "no restart recorded" and rows["cu"]["refused_acks"] == 0


def test_the_html_report_leaves_the_refused_eviction_out(conn):
    page = html_report.render(conn, source="h.duckdb", generated_at=known.D + 100)
    blamed = page[page.index('id="blamed"'):page.index('id="faults"')]
    assert ">j2<" not in blamed and "gpu_thermal" not in blamed
    assert ">n9<" in blamed  # the section does list evictions


def test_the_timeline_shows_no_restart_for_a_refused_eviction(conn):
    j2 = [r for r in queries.run(conn, "timeline") if r["job"] == "j2"]
    assert [r["state"] for r in j2 if r["ts"] == FORGED.issued_at] == ["running"]  # the step of that second
    assert {r["state"] for r in j2} == {"restarting", "running", "down"}  # start, steps, d4's onset
    assert sum(r["state"] == "restarting" for r in j2) == 1
