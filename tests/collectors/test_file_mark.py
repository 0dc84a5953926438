"""A restarted agent reads on in its log files from where the last one stopped: the lines written
while no agent ran are read once, across a rotation or a truncation, never the ones already read
(collectors/file_mark.py)."""

from __future__ import annotations

import logging
import os
import time

import pytest

from faultlens.collectors import file_mark
from faultlens.collectors.agent import Agent, AgentConfig
from faultlens.collectors.file_follower import FileFollower
from faultlens.collectors.file_mark import FileMarks, FilePosition, mark_path
from faultlens.parsing.kernel_quiet import BOOT_UPTIME_S
from faultlens.streams.config import KafkaSettings
from tests.collectors.agent_passes import run_source_once

NCCL_ERROR = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
              "1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3")


def _lines(follower: FileFollower) -> list[str]:
    return [line for _, line in follower.poll()]


def _append(path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def _restart(log, first: FileFollower) -> FileFollower:
    marks = first.marks()
    first.close()
    return FileFollower([str(log)], resume=marks)


def test_a_restart_reads_what_was_written_while_it_was_down_and_nothing_before(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("old 1\nold 2\n")
    first = FileFollower([str(log)])
    assert _lines(first) == []  # from its end, as always
    _append(log, "seen\n")
    assert _lines(first) == ["seen"]
    second = _restart(log, first)
    _append(log, "while down\n")
    assert _lines(second) == ["while down"]
    _append(log, "after\n")
    assert _lines(second) == ["after"]


def test_a_file_with_no_mark_is_read_from_its_end_as_before(tmp_path):
    log, other = tmp_path / "a.log", tmp_path / "b.log"
    log.write_text("x\n")
    other.write_text("y\n")
    second = FileFollower([str(tmp_path / "*.log")], resume={str(other): FilePosition(os.stat(other).st_ino, 0, "")})
    assert _lines(second) == ["y"]  # its mark says nothing was read; a.log has none: its end


def test_a_line_half_written_at_the_mark_is_read_whole_by_the_next_agent(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("")
    first = FileFollower([str(log)])
    assert _lines(first) == []  # opened at its end
    _append(log, "done\nhal")
    assert _lines(first) == ["done"]
    second = _restart(log, first)
    _append(log, "f a line\n")
    assert _lines(second) == ["half a line"]


def test_a_file_rotated_while_down_is_read_to_its_end_then_the_new_one_from_its_start(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    first = FileFollower([str(log)])
    assert _lines(first) == []
    _append(log, "read\n")
    assert _lines(first) == ["read"]
    marks = first.marks()
    first.close()
    _append(log, "before the rotation\n")
    os.rename(log, tmp_path / "kern.log.1")
    log.write_text("after the rotation\n")
    second = FileFollower([str(log)], resume=marks)
    assert _lines(second) == ["before the rotation", "after the rotation"]
    assert second.marks()[str(log)].inode == os.stat(log).st_ino  # the old one is done with
    _append(log, "next\n")
    assert _lines(second) == ["next"]


def test_a_file_cut_and_regrown_while_down_is_read_from_its_start(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("")
    first = FileFollower([str(log)])
    assert _lines(first) == []
    _append(log, "aaaa\nbbbb\n")
    assert _lines(first) == ["aaaa", "bbbb"]
    marks = first.marks()
    first.close()
    with open(log, "w") as f:  # copytruncate, then a writer faster than the restart
        f.write("new 1\nnew 2 is longer than what was there\n")
    assert _lines(FileFollower([str(log)], resume=marks)) == ["new 1", "new 2 is longer than what was there"]


def test_a_long_absence_reads_back_only_the_last_bytes_from_a_line_start(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(file_mark, "RESUME_MAX_BYTES", 25)
    log = tmp_path / "train.log"
    log.write_text("")
    first = FileFollower([str(log)])
    assert _lines(first) == []
    _append(log, "seen\n")
    assert _lines(first) == ["seen"]
    marks = first.marks()
    first.close()
    _append(log, "".join(f"line {i:03d}\n" for i in range(10)))  # 90 bytes while down
    with caplog.at_level(logging.WARNING, logger="faultlens.collectors.file_follower"):
        lines = _lines(FileFollower([str(log)], resume=marks))
    assert lines == ["line 008", "line 009"]  # 25 bytes back falls mid-line: that fragment is dropped
    assert [r.getMessage() for r in caplog.records if r.name == "faultlens.collectors.file_follower"] == [
        f"{log}: 90 bytes written while no agent ran, more than are read back; reading the last 25"]


def test_marks_are_kept_across_instances_and_a_bad_mark_file_warns_and_reads_from_the_end(tmp_path, caplog):
    log = tmp_path / "train.log"
    log.write_text("a\n")
    path = mark_path(tmp_path / "spool", "trainer")
    marks = FileMarks(path)
    follower = marks.follow(FileFollower([str(log)], resume=marks.latest()))
    follower.poll()
    marks.fed(False, final=True)
    assert FileMarks(path).resume == {str(log): FilePosition(os.stat(log).st_ino, 2, b"a\n".hex())}

    path.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="faultlens.collectors.file_mark"):
        assert FileMarks(path).resume == {}
    assert any("is not a mark" in r.getMessage() for r in caplog.records if r.name == "faultlens.collectors.file_mark")


def _agent(tmp_path, boot: str = "boot-a", **over) -> Agent:
    (tmp_path / "boot_id").write_text(boot + "\n")
    config = AgentConfig(**{"job": "j", "node": "n1", "nvml": False, "net": False, "kernel": False,
                            "spool_dir": tmp_path / "spool", "boot_id_file": str(tmp_path / "boot_id"), **over})
    return Agent(config, KafkaSettings(bootstrap="127.0.0.1:1"))


def test_an_agent_restarted_reads_the_nccl_error_the_trainer_printed_while_it_was_down(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text(NCCL_ERROR + "\n")  # the last run's: before any agent, never read
    assert run_source_once(_agent(tmp_path, trainer_logs=[str(log)]), "trainer") == []
    _append(log, NCCL_ERROR.replace("1970", "2011") + "\n")  # the agent is down (OOM-killed)
    [event] = run_source_once(_agent(tmp_path, trainer_logs=[str(log)]), "trainer")
    assert event.data["fault"] == "nccl_error" and "2011" in event.data["line"]
    assert run_source_once(_agent(tmp_path, trainer_logs=[str(log)]), "trainer") == []  # read once


@pytest.mark.skipif(time.monotonic() < BOOT_UPTIME_S + 60, reason="this machine is still in its boot window")
def test_an_agent_restarted_in_the_same_boot_acts_on_the_kern_log_xid_logged_while_it_was_down(tmp_path):
    log = tmp_path / "kern.log"

    def kern(text: str) -> str:
        return f"Nov 29 15:00:00 host kernel: [{time.monotonic():12.6f}] {text}\n"

    log.write_text(kern("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."))  # before: history
    assert run_source_once(_agent(tmp_path, kernel=True, kernel_log=str(log)), "kernel") == []
    _append(log, kern("systemd[1]: Started Session 4 of user root."))
    assert run_source_once(_agent(tmp_path, kernel=True, kernel_log=str(log)), "kernel") == []
    _append(log, kern("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."))  # while down
    [xid] = run_source_once(_agent(tmp_path, kernel=True, kernel_log=str(log)), "kernel")
    assert (xid.data["fault"], xid.data["pid"], xid.data.get("boot")) == ("gpu_lost", 1234, None)
    assert xid.data["action"] != "none"


def test_after_a_reboot_the_old_boots_last_kern_log_lines_are_not_read_on(tmp_path):
    """The Xid that crashed the machine is stamped with the old boot's uptime: read on in the new boot
    it would act against the job now (Boot is not the job)."""
    log = tmp_path / "kern.log"
    log.write_text("")
    assert run_source_once(_agent(tmp_path, kernel=True, kernel_log=str(log)), "kernel") == []
    _append(log, f"Nov 29 15:00:00 host kernel: [{time.monotonic() + 3600:12.6f}] NVRM: Xid (PCI:0000:3b:00): 79, "
                 "pid=1234, GPU has fallen off the bus.\n")
    assert run_source_once(_agent(tmp_path, boot="boot-b", kernel=True, kernel_log=str(log)), "kernel") == []
