"""Following log files: partial lines, rotation, truncation, globs; the log source around a parser."""

from __future__ import annotations

import os
import time

from faultlens.collectors.file_follower import MAX_LINE_BYTES, FileFollower
from faultlens.collectors.log_source import LogSource
from faultlens.events.envelope import Envelope


def _write(path, text: str | bytes, mode: str = "a") -> None:
    data = text.encode() if isinstance(text, str) else text
    with open(path, mode + "b") as f:
        f.write(data)


def _lines(follower: FileFollower) -> list[str]:
    return [line for _, line in follower.poll()]


def test_existing_file_is_read_from_its_end_and_new_lines_follow(tmp_path):
    log = tmp_path / "train.log"
    _write(log, "old 1\nold 2\n")
    f = FileFollower([str(log)])
    assert _lines(f) == []
    _write(log, "new 1\nnew 2\n")
    assert _lines(f) == ["new 1", "new 2"]
    assert _lines(f) == []


def test_from_start_reads_what_is_there(tmp_path):
    log = tmp_path / "train.log"
    _write(log, "a\nb\n")
    assert _lines(FileFollower([str(log)], from_start=True)) == ["a", "b"]


def test_partial_line_is_held_until_its_newline(tmp_path):
    log = tmp_path / "train.log"
    log.touch()
    f = FileFollower([str(log)])
    f.poll()
    _write(log, "NCCL WARN half")
    assert _lines(f) == []
    _write(log, " of a line\r\nnext")
    assert _lines(f) == ["NCCL WARN half of a line"]
    _write(log, "\n")
    assert _lines(f) == ["next"]


def test_rotation_reads_the_old_file_to_its_end_then_the_new_one(tmp_path):
    log = tmp_path / "train.log"
    log.touch()
    f = FileFollower([str(log)])
    f.poll()
    _write(log, "before\n")
    assert _lines(f) == ["before"]
    _write(log, "written just before the rotation\nunterminated")
    os.rename(log, tmp_path / "train.log.1")
    _write(log, "first of the new file\n")
    assert _lines(f) == ["written just before the rotation", "unterminated", "first of the new file"]
    assert f.stats.rotations == 1
    _write(log, "more\n")
    assert _lines(f) == ["more"]


def test_truncation_reads_again_from_the_start(tmp_path):
    log = tmp_path / "train.log"
    log.touch()
    f = FileFollower([str(log)])
    f.poll()
    _write(log, "one long line before truncation\n")
    assert _lines(f) == ["one long line before truncation"]
    _write(log, "after\n", mode="w")  # copytruncate: same inode, smaller size
    assert _lines(f) == ["after"]
    assert f.stats.truncations == 1


def test_glob_picks_up_files_that_appear_later_from_their_start(tmp_path):
    f = FileFollower([str(tmp_path / "rank*.log")])
    assert f.poll() == []
    _write(tmp_path / "rank0.log", "r0 a\n")
    _write(tmp_path / "rank1.log", "r1 a\n")
    got = sorted(f.poll())
    assert got == [(str(tmp_path / "rank0.log"), "r0 a"), (str(tmp_path / "rank1.log"), "r1 a")]


def test_removed_file_ends_its_partial_line_and_a_recreated_one_is_followed(tmp_path):
    log = tmp_path / "x.log"
    log.touch()
    f = FileFollower([str(log)])
    f.poll()
    _write(log, "last words")
    os.unlink(log)
    assert _lines(f) == ["last words"]
    assert f.paths() == []
    _write(log, "back\n")
    assert _lines(f) == ["back"]


def test_garbage_bytes_and_runaway_lines_do_not_break_it(tmp_path):
    log = tmp_path / "x.log"
    log.touch()
    f = FileFollower([str(log)])
    f.poll()
    _write(log, b"\xff\xfe bad utf8\n" + b"y" * (MAX_LINE_BYTES * 2 + 10) + b"\ngood\n")
    lines = _lines(f)
    assert lines[0].endswith(" bad utf8") and f.stats.undecodable == 1
    assert lines[-1] == "good"
    assert all(len(line) <= MAX_LINE_BYTES for line in lines)
    assert "".join(lines[1:-1]) == "y" * (MAX_LINE_BYTES * 2 + 10)


# --- the log source: one parser per file, garbled lines counted, idle flush ---------------------

class _Parsed:
    def __init__(self, kind, data):
        self.source, self.kind, self.data, self.ts, self.mono = "nccl", kind, data, None, None


class _ToyParser:
    """Emits an event for lines with ERROR; joins a 'Traceback' with the lines after it until flush."""

    def __init__(self):
        self.held: list[str] = []

    def feed(self, line):
        if "BOOM" in line:
            raise RuntimeError("parser bug")
        if line.startswith("Traceback") or self.held:
            self.held.append(line)
            return []
        return [_Parsed("nccl_error", {"line": line})] if "ERROR" in line else []

    def flush(self):
        held, self.held = self.held, []
        return [_Parsed("exception", {"line": "\n".join(held)})] if held else []


def _to_envelope(parsed, *, job, node, ts, event_id):
    return Envelope(ts=ts, job=job, node=node, source=parsed.source, kind=parsed.kind, data=parsed.data, id=event_id)


def _source(out):
    return LogSource("trainer", lambda: None, _ToyParser, job="j", node="n1", publish=out.append,
                     to_envelope=_to_envelope, flush_idle_s=5.0)


def test_log_source_counts_garbled_lines_and_keeps_the_good_ones():
    out: list[Envelope] = []
    src = _source(out)
    src.feed("a.log", "ERROR one")
    src.feed("a.log", "BOOM")
    src.feed("a.log", "ERROR two")
    assert [e.data["line"] for e in out] == ["ERROR one", "ERROR two"]
    assert src.stats.garbled == 1 and src.stats.lines == 3 and src.stats.events == 2
    assert all(e.job == "j" and e.node == "n1" and e.source == "nccl" for e in out)
    assert len({e.id for e in out}) == 2


def test_log_source_keeps_a_parser_per_stream_and_flushes_idle_ones():
    out: list[Envelope] = []
    src = _source(out)
    src.feed("rank0.log", "Traceback (most recent call last):")
    src.feed("rank1.log", "ERROR on rank 1")  # another file must not end rank 0's traceback
    src.feed("rank0.log", "ValueError: x")
    assert [e.kind for e in out] == ["nccl_error"]
    src.flush_idle(time.monotonic())  # not idle long enough yet
    assert len(out) == 1
    src.flush_idle(time.monotonic() + 10)
    assert out[-1].kind == "exception" and out[-1].data["line"] == "Traceback (most recent call last):\nValueError: x"


def test_log_source_runs_a_follower_until_stopped(tmp_path):
    import threading

    log = tmp_path / "t.log"
    _write(log, "ERROR a\nTraceback\n  frame\n")
    out: list[Envelope] = []
    src = LogSource("trainer", lambda: FileFollower([str(log)], from_start=True), _ToyParser, job="j", node="n1",
                    publish=out.append, to_envelope=_to_envelope, poll_s=0.02)
    stop = threading.Event()
    stop.set()  # one pass, then the stop path: the held traceback must still come out
    t = threading.Thread(target=src.run, args=(stop,))
    t.start()
    t.join(120)  # one pass and the stop path: milliseconds; the bound is against a hang, generous for load (issue 47)
    assert not t.is_alive()
    assert [e.kind for e in out] == ["nccl_error", "exception"]
    assert out[1].data["line"] == "Traceback\n  frame"


def _following(log) -> FileFollower:
    """A follower of ``log``, created empty, that has looked once (the tail of a running writer's file)."""
    log.touch()
    f = FileFollower([str(log)])
    f.poll()
    return f


def test_copytruncate_mid_line_keeps_the_held_head_of_the_line(tmp_path):
    # A block-buffered writer flushed half a line, logrotate copied and truncated, the writer went on
    # with the line's tail at the new start: the line is whole, as in the copy plus the new file.
    # (Found by tests/outside/test_outside_logs.py: a real kern.log's Xid line lost its date and host.)
    log = tmp_path / "kern.log"
    f = _following(log)
    _write(log, "one\nNov 16 04:38:20 host kernel: [51175.459857] NVRM: Xid (PCI:0000:03:00): 6")
    assert _lines(f) == ["one"]
    with open(log, "r+b") as fh:
        fh.truncate(0)
    _write(log, "2, pid=10839, 0cb5(2d50) 00000000 00000000\ntwo\n")
    assert _lines(f) == ["Nov 16 04:38:20 host kernel: [51175.459857] NVRM: Xid (PCI:0000:03:00): 62, pid=10839, "
                         "0cb5(2d50) 00000000 00000000", "two"]
    assert f.stats.truncations == 1


def test_a_stopping_follower_gives_its_unterminated_last_line(tmp_path):
    log = tmp_path / "rank0.log"
    _write(log, "step 1\nkilled mid-wri")
    f = FileFollower([str(log)], from_start=True)
    assert _lines(f) == ["step 1"]
    assert f.drain() == [(str(log), "killed mid-wri")]
    assert f.drain() == [] and f.stats.lines == 2


def test_log_source_stopping_parses_the_unterminated_last_line(tmp_path):
    # A trainer killed mid-write leaves its last block-buffered flush without a newline: the agent
    # stopping at the job's end must still read it (before: held, then dropped at close).
    import threading

    log = tmp_path / "train.log"
    _write(log, "step 1 loss 2.3\nERROR the last words, unterminated")
    out: list[Envelope] = []
    src = LogSource("trainer", lambda: FileFollower([str(log)], from_start=True), _ToyParser, job="j", node="n1",
                    publish=out.append, to_envelope=_to_envelope, fold_lines=False)
    stop = threading.Event()
    stop.set()
    t = threading.Thread(target=src.run, args=(stop,))
    t.start()
    t.join(120)  # one pass and the stop path: milliseconds; the bound is against a hang, generous for load (issue 47)
    assert not t.is_alive()
    assert [(e.kind, e.data["line"]) for e in out] == [("nccl_error", "ERROR the last words, unterminated")]


def test_a_truncation_the_writer_wrote_past_before_the_poll_is_seen(tmp_path):
    # copytruncate, then the trainer wrote more than had been read before the follower looked: the
    # size never went below the read position (tail -F reads on from there and tears a line).
    log = tmp_path / "train.log"
    f = _following(log)
    _write(log, "step 1\nstep 2\n")
    assert _lines(f) == ["step 1", "step 2"]
    _write(log, "step 3 loss 2.25\nstep 4 loss 2.19\n", mode="w")
    assert _lines(f) == ["step 3 loss 2.25", "step 4 loss 2.19"]
    assert f.stats.truncations == 1
    _write(log, "step 5\n")
    assert _lines(f) == ["step 5"] and f.stats.truncations == 1


def test_a_rotated_file_is_read_on_until_the_writer_moves_to_the_new_one(tmp_path):
    # logrotate renames and creates the path; the writer appends to the old file until its HUP.
    log, old = tmp_path / "kern.log", tmp_path / "kern.log.1"
    f = _following(log)
    _write(log, "before\nNVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fall")
    assert _lines(f) == ["before"]
    os.rename(log, old)
    log.touch()
    assert _lines(f) == []
    assert f.stats.rotations == 1
    _write(old, "en off the bus.\nwritten before the HUP\n")
    assert _lines(f) == ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", "written before the HUP"]
    _write(old, "unterminated")
    _write(log, "after the HUP\n")
    assert _lines(f) == ["unterminated", "after the HUP"]
    _write(old, "never: the writer is gone\n")
    _write(log, "more\n")
    assert _lines(f) == ["more"]
    assert f.drain() == [] and f.paths() == [str(log)]


def test_a_rotated_file_read_between_the_rename_and_the_new_file_loses_nothing(tmp_path):
    log, old = tmp_path / "kern.log", tmp_path / "kern.log.1"
    f = _following(log)
    os.rename(log, old)
    assert _lines(f) == []  # the path names nothing yet: renamed, not gone
    _write(old, "late line\n")
    assert _lines(f) == ["late line"]
    _write(log, "new file\n")
    assert _lines(f) == ["new file"]
    _write(old, "never\n")  # the new file has bytes: the writer moved on
    assert _lines(f) == []
    os.unlink(old)
    assert f.paths() == [str(log)] and f.drain() == []
