"""Recognition that rests on more than message texts (issue 45): the subsystem that wrote a kernel
line and how bad it says it is, known-benign lines, trainer exceptions by type and errno, the
learned fallback, and diagnosis keeping what these find at an alert.

Lines are real where a source is named; the rest are built from the shapes the kernel prints.
"""

from __future__ import annotations

import pytest

from faultlens.diagnosis.engine.core import Engine, EngineConfig
from faultlens.diagnosis.engine.offline import analyze
from faultlens.events.envelope import Envelope
from faultlens.parsing import line_model
from faultlens.parsing.kernel_log import KernelLogParser
from faultlens.parsing.severity import severity_of
from faultlens.parsing.subsystems import attribute, subsystem_of
from faultlens.parsing.trainer_log import TrainerLogParser


def kernel(*lines: str) -> tuple[list, KernelLogParser]:
    p = KernelLogParser()
    return [e for line in lines for e in p.feed(line)] + p.flush(), p


def trainer(*lines: str) -> list:
    p = TrainerLogParser()
    return [e for line in lines for e in p.feed(line)] + p.flush()


@pytest.mark.parametrize("line, subsystem, fault", [
    ("nvme nvme1: I/O 775 QID 2 timeout, aborting", "nvme", "storage"),
    ('XFS (dm-0): metadata I/O error: block 0x48 ("xfs_trans_read_buf_map") error 117 numblks 8', "filesystem", "storage"),
    ("sd 7:0:0:1: [sdf] tag#2 Sense Key : Medium Error [current]", "scsi", "storage"),
    ("JBD2: Error -5 detected when updating journal superblock for sda1-8.", "filesystem", "storage"),
    ("LustreError: 11-0: fs-MDT0000-mdc-ffff: operation obd_ping to node 10.0.0.1@o2ib failed: rc = -107", "lustre", "storage"),
    ("Buffer I/O error on dev sda1, logical block 0, async page read", "block", "storage"),
    ("ena 0000:00:05.0 eth0: Keep alive watchdog timeout.", "nic_driver", "nic"),
    ("mlx5_core: probe of 0000:01:00.0 failed with error -22", "mlx", "nic"),
    ("rcu: INFO: rcu_sched detected expedited stalls on CPUs/tasks: { 3-... }", "scheduler", "kernel"),
    ("nvidia-nvswitch3: open (major=510)", "nvswitch", "nvlink"),
])  # fmt: skip
def test_a_kernel_line_is_attributed_to_the_subsystem_that_wrote_it(line, subsystem, fault):
    att = attribute(line)
    assert att is not None and (att.subsystem, att.fault, att.known) == (subsystem, fault, True)
    # The rules' dispatch reads the tag alone; a line that starts with words is known by its phrase.
    assert subsystem_of(line) == (None if line.startswith("Buffer I/O") else subsystem)


def test_a_driver_the_table_lacks_is_named_by_the_shape_of_its_line_and_classed_by_its_device():
    att = attribute("foonic 0000:3b:00.0: ens5: TX timeout on queue 3")
    assert (att.subsystem, att.known) == ("foonic", False)
    assert attribute("r8152 4-1:1.0 eth1: Tx timeout").fault == "nic"
    assert attribute("zzraid (sdb): write error on sector 12").fault == "storage"


def test_the_priority_a_line_carries_wins_over_its_words():
    assert severity_of("nvme nvme0: something odd", "3,123,456,-;nvme nvme0: something odd").is_error
    assert not severity_of("nvme nvme0: error recovery supported", "6,123,456,-;nvme nvme0: error recovery supported").is_error
    # Without a priority the words decide, and phrases that say all is well are not error words.
    assert severity_of("nvme nvme0: I/O 12 QID 3 timeout, aborting").words == ("timeout", "aborting")
    assert not severity_of("EXT4-fs (sda1): mounted filesystem. Opts: errors=remount-ro").is_error
    assert not severity_of("RAS: Correctable Errors collector initialized.").is_error


def test_an_error_line_no_rule_took_gets_its_subsystems_class_and_only_an_alert():
    [e], p = kernel("[ 812.101] nvme nvme1: I/O 775 QID 2 timeout, aborting")
    assert (e.kind, e.data["fault"], e.data["action"], e.data["subsystem"]) == ("subsystem_error", "storage", "alert", "nvme")
    assert "classified by subsystem nvme" in e.data["finding"] and e.data["device"] == "nvme1"
    assert p.stats.by_subsystem == 1 and p.stats.recognised == 1


def test_a_line_the_kernel_printed_as_information_gives_nothing():
    events, p = kernel("6,991,812101,-;nvme nvme1: I/O 775 QID 2 timeout, aborting")
    assert events == [] and p.stats.skipped == 1


def test_precise_rules_still_decide_where_they_exist():
    # leptonai/gpud components/disk/kmsg_matcher_test.go: the catalogue's rule evicts, not the subsystem's alert
    [e], _ = kernel("nvme nvme4: Disabling device after reset failure: -19")
    assert (e.kind, e.data["action"], e.data["rule"]) == ("disk_error", "evict", "storage.nvme_disabled")
    [e], _ = kernel("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.")
    assert e.kind == "gpu_lost" and e.data["action"] == "evict"


@pytest.mark.parametrize("line", [
    # leptonai/gpud components/accelerator/nvidia/infiniband/kmsg_matcher_test.go
    "mlx5_core 0000:d2:00.0: mlx5_cmd_out_err:838:(pid 268269): ACCESS_REG(0x805) op_mod(0x1) failed",
    # leptonai/gpud components/accelerator/nvidia/fabric-manager/log_matcher_test.go
    "nv-fabricmanager[1929729]: request to query NVSwitch device information from NVSwitch driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]",
])  # fmt: skip
def test_the_peers_benign_lines_fire_nothing(line):
    events, p = kernel(line)
    assert events == [] and p.stats.benign == 1 and p.stats.alarming == 0


@pytest.mark.parametrize("lines, fault, action", [
    (["2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] OSError: [Errno 28] No space left on device"], "storage", "alert"),
    (["[rank3]: RuntimeError: write(): fd 29 failed with Input/output error"], "storage", "stop_time_diagnosis"),
    (["RuntimeError: DataLoader worker (pid 629) is killed by signal: Killed."], "host_oom", "restart"),
    # A traceback whose innermost frame is the program's own: the errno, not the frame, says whose fault.
    (["Traceback (most recent call last):", '  File "/home/u/train.py", line 88, in save', "    f.write(blob)",
      "IsADirectoryError: [Errno 28] No space left on device: '/ckpt/step_100.pt'"], "storage", "alert"),
    (["Traceback (most recent call last):", '  File "/home/u/train.py", line 12, in load', "    x = [0] * n", "MemoryError"],
     "host_oom", "restart"),
])  # fmt: skip
def test_trainer_exceptions_are_judged_by_type_errno_and_message_after_any_prefix(lines, fault, action):
    found = [e for e in trainer(*lines) if e.kind == "exception"]
    assert [(e.data["fault"], e.data["action"]) for e in found] == [(fault, action)]


def test_a_value_error_from_the_programs_own_frame_is_still_user_code():
    [e] = trainer("Traceback (most recent call last):", '  File "/home/u/train.py", line 5, in <module>', "    int('x')",
                  "ValueError: invalid literal for int() with base 10: 'x'")
    assert (e.data["fault"], e.data["action"]) == ("user_code", "rollback")


@pytest.mark.parametrize("line, fault", [
    ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes may have been killed.", "host_oom"),
    ("srun: error: node017: tasks 0-3: Out Of Memory", "host_oom"),
    ("srun: error: Node failure on node017", "node_silent"),
])  # fmt: skip
def test_the_schedulers_own_lines(line, fault):
    [e] = trainer(line)
    assert e.data["fault"] == fault


def test_the_model_is_only_consulted_for_lines_nothing_else_took_and_only_alerts():
    model = line_model.current()
    assert model is not None, "the shipped model (parsing/line_model.pkl.gz) loads"
    line = "[ 9866.176484] zzfs (c0ffee): osd2 down, failing over: fatal error talking to the cluster"
    with line_model.using(None):
        assert kernel(line)[0] == []  # no rule, no subsystem class: unrecognised without the model
    events, p = kernel(line)
    for e in events:
        assert e.kind == "suspect_line" and e.data["action"] == "alert" and 0 < e.data["confidence"] <= 1
    assert p.stats.by_model == len(events)


def test_the_plain_scorer_gives_sklearns_probabilities():
    # A loaded model has no pipeline (its file holds the fitted numbers only): one trained here does.
    model = line_model.train([("kernel", "nvme nvme0: I/O 0 QID 0 timeout, aborting", "storage"),
                              ("kernel", "nvme nvme1: I/O 7 QID 3 timeout, reset controller", "storage"),
                              ("nccl", "NCCL WARN Net : Connection closed by remote peer", "nccl_error"),
                              ("nccl", "NCCL WARN Call to recv failed : Connection reset by peer", "nccl_error"),
                              ("kernel", "eth0: link up, 100Gbps", "healthy"), ("kernel", "eth1: link up, 25Gbps", "healthy")])
    for text in ("kernel nvme nvme0: I/O 0 QID 0 timeout, aborting", "nccl RuntimeError: something failed", "kernel all is well"):
        assert model.pipeline.predict_proba([text])[0] == pytest.approx(model.proba(text), abs=1e-6)


def test_diagnosis_keeps_a_subsystem_or_model_finding_at_an_alert_whatever_the_event_says():
    # Grey evidence is debounced (diagnosis/engine/debounce.py): one such line is a suspicion and raises
    # nothing; the second on the same machine within the window makes the finding, still an alert.
    base = {"line": "nvme nvme1: I/O 775 QID 2 timeout, aborting", "fault": "storage", "severity": "error"}

    def pair(node: str, kind: str, data: dict, t0: float) -> list[Envelope]:
        return [Envelope(ts=t0 + dt, job="j1", node=node, source="kernel", kind=kind, data={**base, **data}, id=f"{node}-{dt}")
                for dt in (0.0, 30.0)]  # fmt: skip

    events = (pair("n001", "subsystem_error", {"action": "evict", "rule": "subsystem.nvme", "basis": "subsystem"}, 1.8e9)
              + pair("n002", "suspect_line", {"action": "evict_reset_gpu", "rule": "model", "basis": "model", "confidence": 0.9}, 1.8e9 + 1))  # fmt: skip
    events.sort(key=lambda e: e.ts)
    found = analyze(events, Engine(EngineConfig(implicit=False, peer_model=False)))
    assert found and {d.action for d in found} == {"alert"}
    assert {n for d in found for n in d.nodes} == {"n001", "n002"}
    once = analyze([events[0], events[1]], Engine(EngineConfig(implicit=False, peer_model=False)))
    assert not [d for d in once if d.action != "none"]


def test_dmesg_decode_lines_carry_their_level_past_the_clock():
    # dmesg --decode (the agent's dmesg follower passes it): the level column, then the clock.
    [e], _ = kernel("kern  :err   : [  123.456789] nvme nvme0: something odd happened")
    assert (e.kind, e.data["priority"], e.data["fault"], e.data["subsystem"]) == ("subsystem_error", 3, "storage", "nvme")
    assert kernel("kern  :info  : [  123.456789] nvme nvme0: something odd happened")[0] == []
