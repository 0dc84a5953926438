"""A copy of a real command published under its id (forged, or the real one altered) never stays
the command on record when the history has the verify key, whichever arrives first; the refused
copy stays visible, with why, in `refused_commands` (history.command_copies)."""

from __future__ import annotations

import os

import pytest
from msgspec.structs import replace

from faultlens.events.command import Command
from faultlens.events.signing import SigningKey
from faultlens.history import queries
from faultlens.history.command_copies import CONFLICT, DISPLACED, screen_commands
from faultlens.history.consumer import history_runner
from faultlens.history.schema import memory_history, open_history
from faultlens.history.sink import HistorySink, build_batch
from faultlens.streams.producer import Producer

T0 = 1_699_920_000.0
REMEDIATION = SigningKey.generate()  # the key remediation signs with
ATTACKER = SigningKey.generate()
KEYS = REMEDIATION.verify_keys()


def genuine(job: str = "job-a", cid: str = "cmd-7f3a") -> Command:
    return Command(id=cid, job=job, action="evict", nodes=("n017",), ranks=(34, 35), reason="gpu_lost on n017",
                   diagnosis_id="d-91", issued_at=T0 + 100.0, expires_at=T0 + 400.0).signed(REMEDIATION)


def forged_from(real: Command) -> Command:
    """The same id and key id, another victim, signed with a key nobody trusts."""
    unsigned = replace(real, nodes=("n003",), ranks=(6, 7), reason="gpu_lost on n003", issued_at=real.issued_at - 5,
                       signature="")
    return replace(unsigned, signature=ATTACKER.sign(unsigned.canonical()))


def altered_from(real: Command) -> Command:
    """The genuine signature copied onto another body."""
    return replace(real, nodes=("n003",))


def stored(conn, cid: str) -> dict:
    row = conn.execute("SELECT nodes, signature, issued_at FROM commands WHERE id = ?", [cid]).fetchone()
    return {"nodes": tuple(row[0]), "signature": row[1], "issued_at": row[2]}


def refused(conn, cid: str) -> list[tuple[tuple[str, ...], str]]:
    return [(tuple(n), p) for n, p in conn.execute(
        "SELECT nodes, problem FROM refused_commands WHERE id = ? ORDER BY problem, nodes", [cid]).fetchall()]


def written(result: dict[str, int]) -> tuple[int, int]:
    """(commands, refused_commands) rows a write added or replaced."""
    return result.get("commands", 0), result.get("refused_commands", 0)


def marks(conn, cid: str) -> list[float]:
    return [r[0] for r in conn.execute("SELECT ts FROM job_timeline WHERE id = ?", [f"cmd|{cid}"]).fetchall()]


@pytest.mark.parametrize("copy", [forged_from, altered_from])
@pytest.mark.parametrize("same_batch", [False, True])
def test_the_genuine_copy_is_kept_even_when_a_refused_one_came_first(copy, same_batch):
    conn = memory_history()
    sink = HistorySink(conn)
    real = genuine()
    fake = copy(real)
    if same_batch:
        sink.write(build_batch([fake, real], keys=KEYS))
    else:
        assert written(sink.write(build_batch([fake], keys=KEYS))) == (1, 1)  # alone, the refused copy holds the id
        assert stored(conn, real.id)["nodes"] == ("n003",) and marks(conn, real.id) == []
        sink.write(build_batch([real], keys=KEYS))
    assert stored(conn, real.id) == {"nodes": ("n017",), "signature": real.signature, "issued_at": real.issued_at}
    # The refused copy stays visible with the signature check's reason (a displaced copy that was
    # already recorded keeps its first reason).
    ((nodes, problem),) = refused(conn, real.id)
    assert nodes == ("n003",) and "bad signature" in problem
    # A forged command restarted nothing: only the genuine one marks the timeline.
    assert marks(conn, real.id) == [real.issued_at]
    # Evictions count the genuine victim only.
    ev = queries.run(conn, "over_eviction")[0]
    assert ev["evicted_nodes"] == 1
    # Delivered again, in any order: nothing changes.
    for batch in ([fake, real], [real], [fake]):
        assert written(sink.write(build_batch(batch, keys=KEYS))) == (0, 0)
    assert stored(conn, real.id)["nodes"] == ("n017",) and len(refused(conn, real.id)) == 1


def test_a_refused_copy_after_the_genuine_one_changes_nothing_but_is_recorded():
    conn = memory_history()
    sink = HistorySink(conn)
    real = genuine()
    sink.write(build_batch([real], keys=KEYS))
    unsigned = replace(forged_from(real), signature="", key_id="")
    assert written(sink.write(build_batch([forged_from(real), unsigned], keys=KEYS))) == (0, 2)
    assert stored(conn, real.id)["nodes"] == ("n017",)
    assert [p.split(" ")[0] for _, p in refused(conn, real.id)] == ["bad", "unsigned"]


def test_a_forged_command_with_no_genuine_copy_is_on_record_as_refused():
    # The demo's forged command: its id is its own; the receivers' acks call it refused, and the
    # history's own check records why.
    conn = memory_history()
    fake = forged_from(genuine(cid="forged-by-demo"))
    HistorySink(conn).write(build_batch([fake], keys=KEYS))
    assert stored(conn, fake.id)["nodes"] == ("n003",)
    assert [p for _, p in refused(conn, fake.id)] == [f"bad signature under key {REMEDIATION.key_id} (forged or altered)"]
    assert marks(conn, fake.id) == []


def test_a_forged_command_no_receiver_answered_evicted_nobody_in_the_report():
    # Its receivers were gone (or never got it): no ack either way. The history's own check
    # refused the copy it holds, so the report must not count it as an eviction of n003.
    conn = memory_history()
    fake = forged_from(genuine(cid="forged-unanswered"))
    HistorySink(conn).write(build_batch([fake], keys=KEYS))
    (outcome,) = queries.run(conn, "command_outcomes")
    assert outcome["command_id"] == fake.id and outcome["outcome"] == "refused"
    (taken,) = queries.run(conn, "actions_taken")
    assert taken["receivers"] == "refused"
    assert [row["evicted_nodes"] for row in queries.run(conn, "over_eviction")] == [0]
    # The genuine command in its place, unanswered as well, counts: the history cannot tell it
    # from one obeyed silently.
    HistorySink(conn).write(build_batch([genuine(cid="forged-unanswered")], keys=KEYS))
    (outcome,) = queries.run(conn, "command_outcomes")
    assert outcome["outcome"] != "refused" and tuple(outcome["nodes"]) == ("n017",)


def test_a_history_file_from_before_refused_copies_reads_as_none(tmp_path):
    path = tmp_path / "old.duckdb"
    conn = open_history(path, create=True)
    HistorySink(conn).write(build_batch([genuine()], keys=KEYS))
    conn.execute("DROP TABLE refused_commands")  # as a file written before the table was
    conn.close()
    old = open_history(path, read_only=True)
    try:
        (outcome,) = queries.run(old, "command_outcomes")
        assert outcome["outcome"] != "refused"
        assert queries.run(old, "refused_copies") == []
    finally:
        old.close()


def test_without_keys_the_first_copy_stays_and_the_other_is_visible_until_a_key_settles_it():
    conn = memory_history()
    sink = HistorySink(conn)
    real = genuine()
    fake = forged_from(real)
    sink.write(build_batch([fake]))
    sink.write(build_batch([real]))
    assert stored(conn, real.id)["nodes"] == ("n003",)  # no key: nothing tells the forgery
    assert refused(conn, real.id) == [(("n017",), CONFLICT)]  # but the other copy is not lost
    # The history is consumed again with the key (the genuine copy redelivered): it settles it.
    assert written(sink.write(build_batch([real], keys=KEYS))) == (1, 1)
    assert stored(conn, real.id)["nodes"] == ("n017",)
    assert (("n003",), DISPLACED) in refused(conn, real.id)


def test_screening_is_pure_and_keeps_one_copy_per_id():
    real = genuine()
    twice = screen_commands([real, real, forged_from(real)], KEYS)
    assert twice.kept == (real,) and twice.verified
    assert [p.split(" ")[0] for _, p in twice.refused] == ["bad"]
    keyless = screen_commands([forged_from(real), real, real], None)
    assert keyless.kept == (forged_from(real),) and keyless.refused == ((real, CONFLICT),) and not keyless.verified


@pytest.mark.broker
def test_the_history_consumer_keeps_the_genuine_copy_from_the_topic(kafka_settings, group_name, tmp_path):
    job = f"copies-{os.getpid()}-{group_name[-6:]}"
    real = genuine(job=job, cid=f"{job}-cmd")
    fake = forged_from(real)
    with Producer(kafka_settings) as p:
        p.send("commands", job.encode(), fake.encode())  # the forgery first on the partition
        p.send("commands", job.encode(), real.encode())
        p.flush()
    conn = open_history(tmp_path / "h.duckdb", create=True)
    runner, _ = history_runner(kafka_settings, conn, group=group_name, topics=("commands",), keys=KEYS)
    runner.run(idle_stop_s=3.0, handle_signals=False)
    assert stored(conn, real.id)["nodes"] == ("n017",)
    assert [n for n, _ in refused(conn, real.id)] == [("n003",)]
    conn.close()


def test_the_history_command_refuses_a_verify_key_it_cannot_read(tmp_path, capsys):
    from faultlens.cli import main

    assert main(["history", "--db", str(tmp_path / "h.duckdb"), "--verify-key", str(tmp_path / "nope.pem"),
                 "--bootstrap", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert "verify key" in err and "nope.pem" in err
