"""A command its receivers refused (forged, duplicate, expired ...) evicted nobody: the history's
evictions, time to command and incidents leave it out, and `command_outcomes` says it was refused
(the history of tests/history/answered.py).
"""

from __future__ import annotations

import dataclasses

import pytest

from faultlens.collectors.checks.source import ChecksSource
from faultlens.events.command import Command
from faultlens.events.envelope import Envelope
from faultlens.events.signing import SigningKey
from faultlens.history import queries
from faultlens.history.schema import memory_history, open_history
from faultlens.history.sink import HistorySink, build_batch
from faultlens.streams.config import KafkaSettings
from tests.history import known
from tests.history.answered import FORGED, TRUSTED, acks, write_history
from tests.history.report_page import render


@pytest.fixture
def conn(tmp_path):
    answers = acks()
    assert [a.data["obeyed"] for a in answers] == [False, False, True, False, False]
    assert [a.data["addressed"] for a in answers] == [True, True, True, True, False]
    write_history(tmp_path / "h.duckdb", answers)
    c = open_history(tmp_path / "h.duckdb", read_only=True)
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
    # obeyed once, refused as a duplicate afterwards: it did happen
    assert rows["c1"]["outcome"] == "job restarted" and rows["c1"]["obeyed_acks"] == 1
    assert rows["c1"]["refusal"].startswith("duplicate")
    assert rows["cu"]["outcome"] == "no restart recorded" and rows["cu"]["refused_acks"] == 0


def test_the_html_report_leaves_the_refused_eviction_out(conn):
    page = render(conn, source="h.duckdb", generated_at=known.D + 100)
    blamed = page[page.index('id="blamed"'):page.index('id="faults"')]
    assert ">j2<" not in blamed and "gpu_thermal" not in blamed
    assert ">n9<" in blamed  # the section does list evictions


def test_the_timeline_shows_no_restart_for_a_refused_eviction(conn):
    j2 = [r for r in queries.run(conn, "timeline") if r["job"] == "j2"]
    assert [r["state"] for r in j2 if r["ts"] == FORGED.issued_at] == ["running"]  # the step of that second
    assert {r["state"] for r in j2} == {"restarting", "running", "down"}  # start, steps, d4's onset
    assert sum(r["state"] == "restarting" for r in j2) == 1


def test_a_node_agent_refusal_counts_unless_another_node_ran_the_checks():
    """The agent acks only its refusals (`check`/`command_ack`): a `run_checks` some node answered
    with results was carried out; one every asked node refused was not."""
    stale = SigningKey.generate()  # n1's agent trusts an old key
    t = known.T0 + 85
    asks = [Command(id=f"rc{i}", job="j1", action="run_checks", issued_at=t, expires_at=t + 300, nodes=("n0", "n1"),
                    diagnosis_id="d2").signed(TRUSTED) for i in (1, 2)]
    refusals = []
    agent = ChecksSource(KafkaSettings(bootstrap="127.0.0.1:1"), keys=stale.verify_keys(), job="j1", node="n1",
                         publish=refusals.append)
    for cmd in asks:
        agent.listener.dispatch(cmd.encode(), now=t + 1)
    assert [a.data["command_id"] for a in refusals] == ["rc1", "rc2"]
    ran = Envelope(ts=t + 20, job="j1", node="n0", source="check", kind="result", id="rc1-n0",
                   data={"request_id": "rc1", "diagnosis_id": "d2", "passed": True, "failed": [], "checks": [],
                         "duration_s": 19.0})
    c = memory_history()
    HistorySink(c).write(build_batch([*known.records(), *asks, ran,
                                      *(dataclasses.replace(a, ts=t + 1.5) for a in refusals)]))
    rows = {r["command_id"]: r for r in queries.run(c, "actions_taken")}
    assert rows["rc1"]["receivers"] == "obeyed" and rows["rc1"]["refused_acks"] == 1
    assert rows["rc2"]["receivers"] == "refused" and rows["rc2"]["refusal"].startswith("signed with unknown key")
    c.close()
