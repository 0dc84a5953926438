"""An agent restarted in the same boot acts on the kernel lines logged while it was down, and on
nothing its predecessor already reported; an agent of a new boot acts only on what follows its
start (collectors/kernel_mark.py, issue 54: "Boot is not the job")."""

from __future__ import annotations

import logging
import time

import msgspec
import pytest

from faultlens.collectors.agent import Agent, AgentConfig
from faultlens.collectors.kernel_mark import MARK_EVERY_S, MARK_FILE, KernelMark, Mark
from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.events.envelope import Envelope, new_id
from faultlens.parsing.kernel_quiet import BOOT_UPTIME_S
from faultlens.streams.config import KafkaSettings
from tests.collectors.agent_passes import run_source_once

XID79 = "3,{seq},{usec},-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
HEALTHY = "6,{seq},{usec},-;systemd[1]: Started Session {seq} of user root."

pytestmark = pytest.mark.skipif(time.monotonic() < BOOT_UPTIME_S + 60,
                                reason="this machine is still in its boot window: every line is boot")


class Ring:
    """A fake kernel ring: what a reader opened from the start or the end of it would read. ``end``:
    where the end was when the agent started (it opens its reader then; these tests run it later)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.opened: list[bool] = []
        self.end: int | None = None

    def log(self, template: str, uptime: float | None = None) -> float:
        uptime = time.monotonic() if uptime is None else uptime
        self.lines.append(template.format(seq=len(self.lines), usec=int(uptime * 1e6)))
        return uptime

    def open(self, from_start: bool) -> "RingReader":
        self.opened.append(from_start)
        end, self.end = len(self.lines) if self.end is None else self.end, None
        return RingReader(self, 0 if from_start else end)


class RingReader:
    def __init__(self, ring: Ring, pos: int):
        self.ring, self.pos = ring, pos

    def poll(self) -> list[str]:
        out, self.pos = self.ring.lines[self.pos:], len(self.ring.lines)
        return out

    def close(self) -> None:
        pass


def _agent(tmp_path, ring: Ring, boot: str = "boot-a", **over) -> Agent:
    (tmp_path / "boot_id").write_text(boot + "\n")
    ring.end = len(ring.lines)
    config = AgentConfig(job="j", node="n1", nvml=False, net=False, spool_dir=tmp_path / "spool",
                         boot_id_file=str(tmp_path / "boot_id"), **over)
    return Agent(config, KafkaSettings(bootstrap="127.0.0.1:1"), kernel_reader=ring.open)


def _run_kernel(agent: Agent) -> list:
    return run_source_once(agent, "kernel")


def _acting(events: list) -> list:
    return [e for e in events if e.data["action"] != "none"]


def test_a_restart_acts_on_an_xid_logged_while_the_agent_was_down(tmp_path):
    ring = Ring()
    ring.log(HEALTHY, 30.0)  # boot
    first = _agent(tmp_path, ring)
    seen = ring.log(HEALTHY)
    assert _run_kernel(first) == [] and ring.opened == [False]
    mark = msgspec.json.decode((tmp_path / "spool" / MARK_FILE).read_bytes(), type=Mark)
    assert (mark.boot_id, mark.uptime) == ("boot-a", pytest.approx(seen, abs=1e-6))

    down = ring.log(XID79)  # the agent is down (OOM-killed): nobody reads this
    second = _agent(tmp_path, ring)
    assert down < second.started_uptime  # logged before this agent started, after the last reported line
    [xid] = _run_kernel(second)
    assert ring.opened == [False, True]  # the ring from its start, the reported part skipped
    assert (xid.data["fault"], xid.data.get("boot")) == ("gpu_lost", None)
    assert xid.data["action"] != "none"


def test_a_restart_with_nothing_logged_while_down_acts_on_nothing_old(tmp_path):
    ring = Ring()
    ring.log(XID79, 30.0)  # the boot's own
    first = _agent(tmp_path, ring)
    ring.log(XID79)  # the fault the first agent reports
    ring.log(HEALTHY)
    assert len(_acting(_run_kernel(first))) == 1

    assert _run_kernel(_agent(tmp_path, ring)) == []  # nothing after its mark: nothing read again
    assert ring.opened == [False, True]


def test_a_new_boot_acts_on_nothing_from_before_the_agent_started(tmp_path):
    ring = Ring()
    first = _agent(tmp_path, ring, boot="boot-a")
    ring.log(HEALTHY)
    _run_kernel(first)
    assert (tmp_path / "spool" / MARK_FILE).exists()

    ring.log(XID79)  # before the next agent starts, in what is now another boot
    assert _run_kernel(_agent(tmp_path, ring, boot="boot-b")) == []
    assert ring.opened[-1] is False  # from the end, as without a mark

    # Read from the start on purpose: the old line is recorded, never acted on.
    [old] = _run_kernel(_agent(tmp_path, ring, boot="boot-c", kernel_from_start=True))
    assert (old.data["fault"], old.data["action"], old.data["boot"]) == ("gpu_lost", "none", True)


def test_a_kernel_log_file_is_not_read_back_on_a_restart(tmp_path):
    """A kern.log holds earlier boots too: their uptimes say nothing in this one. (It is read on
    from its byte offset instead: tests/collectors/test_file_mark.py.)"""
    ring = Ring()
    first = _agent(tmp_path, ring, kernel_log=str(tmp_path / "kern.log"))
    ring.log(HEALTHY)
    _run_kernel(first)
    ring.log(XID79)
    _run_kernel(_agent(tmp_path, ring, kernel_log=str(tmp_path / "kern.log")))
    assert ring.opened == [False, False]


def test_a_mark_that_cannot_be_read_or_written_warns_once_and_changes_nothing(tmp_path, caplog):
    ring = Ring()
    (tmp_path / "spool" / MARK_FILE).mkdir(parents=True)  # neither readable nor replaceable as a file
    caplog.set_level(logging.WARNING, logger="faultlens.collectors.kernel_mark")
    agent = _agent(tmp_path, ring)
    ring.log(XID79, agent.started_uptime - 5)  # before its start: recorded only
    for _ in range(3):
        ring.log(HEALTHY)
        agent.kernel_mark.fed(True)
    [old] = _run_kernel(agent)
    assert old.data["action"] == "none" and ring.opened == [False]
    warnings = [r.getMessage() for r in caplog.records if r.name == "faultlens.collectors.kernel_mark"]
    assert len([w for w in warnings if "unreadable" in w]) == 1
    assert len([w for w in warnings if "cannot be written" in w]) == 1

    (tmp_path / "spool" / MARK_FILE).rmdir()
    (tmp_path / "spool" / MARK_FILE).write_text("{not a mark")
    assert _agent(tmp_path, ring).kernel_mark.resume_from is None
    assert any("is not a mark" in r.getMessage() for r in caplog.records)


def test_a_kernel_source_reopened_after_a_failure_reads_on_from_its_mark(tmp_path):
    ring = Ring()
    mark = KernelMark(tmp_path / MARK_FILE, boot_id="b", started_uptime=time.monotonic())
    reader = mark.open(ring.open, from_start=False, resumable=True)
    ring.log(HEALTHY)
    assert len(reader.poll()) == 1
    mark.fed(False)
    down = ring.log(XID79)  # the reader failed (dmesg exited) and is reopened after its back-off
    assert [line.split(",")[2] for line in mark.open(ring.open, from_start=False, resumable=True).poll()] == \
        [str(int(down * 1e6))]
    assert ring.opened == [False, True]


def test_an_xid_reported_twice_across_a_restart_is_one_diagnosis(tmp_path):
    """The overlap a killed agent may leave (a line published, the agent killed before its mark was
    written) reaches the engine twice, under two ids and read times: dedup folds it."""
    ring = Ring()
    first = _agent(tmp_path, ring)
    ring.log(XID79)
    [xid] = _run_kernel(first)
    again = Envelope(ts=xid.ts + 10.0, job=xid.job, node=xid.node, source=xid.source, kind=xid.kind,
                     data=dict(xid.data), id=new_id())
    engine = Engine(EngineConfig(implicit=False))
    out = engine.process(xid) + engine.process(again) + engine.flush()
    assert {d.id for d in out} == {out[0].id} and out[0].fault == "gpu_lost"
    assert max(d.count for d in out) == 2


def test_the_mark_moves_at_once_after_an_event_and_at_most_every_few_seconds_otherwise(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("faultlens.collectors.kernel_mark.time.monotonic", lambda: clock[0])
    path = tmp_path / MARK_FILE
    mark = KernelMark(path, boot_id="b", started_uptime=500.0)
    ring = Ring()
    reader = mark.open(ring.open, from_start=False, resumable=True)

    def on_disk() -> float:
        return msgspec.json.decode(path.read_bytes(), type=Mark).uptime

    mark.fed(False)
    assert on_disk() == 500.0  # a fresh start marks its start at once
    ring.log(HEALTHY, 600.0)
    reader.poll()
    mark.fed(False)
    assert on_disk() == 500.0  # healthy lines: not before MARK_EVERY_S
    clock[0] += MARK_EVERY_S
    mark.fed(False)
    assert on_disk() == 600.0
    ring.log(XID79, 601.0)
    reader.poll()
    mark.fed(True)  # its event went out: the mark follows at once
    assert on_disk() == 601.0
