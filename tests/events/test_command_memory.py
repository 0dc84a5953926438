"""The command memory file: survives restarts, forgets expired ids, shrugs off damage."""

import json

from faultlens.events.command_memory import CommandMemory, memory_file


def test_ids_survive_a_restart_until_they_expire(tmp_path):
    path = memory_file(tmp_path, "hook", "job-1", "r3")
    m = CommandMemory(path)
    m.remember("a", expires_at=1300.0, now=1000.0)
    m.remember("b", expires_at=1600.0, now=1100.0)
    restarted = CommandMemory(path)
    assert "a" in restarted and "b" in restarted
    restarted.remember("c", expires_at=1900.0, now=1400.0)  # "a" expired at 1300: forgotten
    assert "a" not in restarted
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{"id": "b", "expires_at": 1600.0}, {"id": "c", "expires_at": 1900.0}]
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_one_file_per_receiver_with_safe_names(tmp_path):
    a = memory_file(tmp_path, "hook", "job/../x", "r0")
    b = memory_file(tmp_path, "hook", "job/../x", "r1")
    assert a != b and a.parent == tmp_path and "/" not in a.name


def test_damaged_lines_are_skipped_and_good_ones_kept(tmp_path, caplog):
    path = tmp_path / "seen.jsonl"
    path.write_text('{"id": "good", "expires_at": 2000}\n{"id": "trunc\nnot json\n{"expires_at": 5}\n'
                    '{"id": "bad-exp", "expires_at": "soon"}\n[1, 2]\n\n')
    with caplog.at_level("WARNING"):
        m = CommandMemory(path)
    assert "good" in m and len(m) == 1 and "5 damaged line(s)" in caplog.text


def test_an_unreadable_file_starts_empty_and_an_unwritable_one_never_crashes(tmp_path, caplog):
    blocked = tmp_path / "seen.jsonl"
    blocked.mkdir()  # a directory where the file should be: unreadable and unwritable
    with caplog.at_level("WARNING"):
        m = CommandMemory(blocked)
        m.remember("x", expires_at=2000.0, now=1000.0)
    assert "x" in m  # still refuses the duplicate while it runs
    assert "starting empty" in caplog.text and "not saved" in caplog.text


def test_the_memory_is_bounded(tmp_path):
    m = CommandMemory(tmp_path / "seen.jsonl", limit=3)
    for i in range(5):
        m.remember(f"id{i}", expires_at=2000.0 + i, now=1000.0)
    assert len(m) == 3 and "id0" not in m and "id4" in m  # the soonest to expire go first
