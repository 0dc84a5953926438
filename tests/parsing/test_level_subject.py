"""A line whose own format states error or fatal is read by the subject it names (parsing.level_subject).

Each line here is written for the test, beside its healthy look-alikes: the same line at a level under error,
the same saying it retries, one naming no subject, one naming the subject as a setting or inside a name.
"""

from __future__ import annotations

import pytest

from faultlens.parsing.level_subject import read_level_subject, stated_level
from faultlens.parsing.trainer_log import TrainerLogParser


def _events(line: str) -> list[dict[str, object]]:
    parser = TrainerLogParser()
    return [e.data for e in parser.feed(line) + parser.flush()]


def _acting(line: str) -> list[tuple[object, object]]:
    return [(d["fault"], d["action"]) for d in _events(line) if d.get("action") not in ("none", None)]


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        # glog's error letter, no word of trouble in the message: the letter frame passes the pre-filter
        ("E0304 11:02:17.512300   4411 verbs_endpoint.cc:201] RdmaEndpoint: no usable RNIC on this host", "nic"),
        ("F0304 11:02:17.512300   4411 endpoint.cc:88] ibv_open_device returned nothing for port 1", "nic"),
        ('time="2026-03-04T11:02:17Z" level=error msg="shared drive /data went away under the job"', "storage"),
        ("2026-03-04 11:02:17,512 ERROR Scheduler - agent on host worker-7 stopped answering its checks", "node_silent"),
        ("<FATAL> inode 4411 of the scratch area went missing", "storage"),
    ],
)
def test_an_error_level_with_a_subject_is_an_alert_of_the_subjects_class(line: str, fault: str) -> None:
    assert _acting(line) == [(fault, "alert")]
    assert [d["rule"] for d in _events(line)] == ["level_subject"]


@pytest.mark.parametrize(
    "line",
    [
        # the same lines at warning or info: the program's own level says it is no failure
        "W0304 11:02:17.512300   4411 verbs_endpoint.cc:201] RdmaEndpoint: no usable RNIC on this host",
        'time="2026-03-04T11:02:17Z" level=warning msg="shared drive /data went away under the job"',
        "2026-03-04 11:02:17,512 INFO Scheduler - agent on host worker-7 stopped answering its checks",
        # the same saying it tries again, or that it recovered
        "E0304 11:02:17.512300   4411 verbs_endpoint.cc:201] RdmaEndpoint: no usable RNIC on this host, retrying in 5s",
        "<FATAL> inode 4411 of the scratch area went missing; recovered from the journal",
        # at error, but naming no subject, or the subject only as a setting, inside a name, or the job's own thing first
        "[ERROR] step 12 produced an unexpected value",
        "ERROR: invalid value for option --drive",
        "[ERROR] pull stopped for docker://registry.example/team-nvidia:latest",
        'level=error msg="container for agent sidecar exited"',
        # a hedge
        "[ERROR] the RNIC may be cabled to another switch",
    ],
)
def test_its_healthy_look_alikes_are_not_read_by_their_level(line: str) -> None:
    # (the line model may still guess at one of them: its own bar, not this reading's)
    assert not [d for d in _events(line) if d.get("rule") == "level_subject"]
    assert not [f for f, _ in _acting(line) if f in ("nic", "storage", "node_silent", "gpu_lost")]


def test_the_level_is_the_formats_slot_not_a_word_of_the_message() -> None:
    assert stated_level("E0304 11:02:17.512300   4411 x.cc:1] no RNIC") == ("error", 36)
    assert stated_level("2026-03-04 11:02:17,512 ERROR Scheduler - x") is not None
    assert stated_level("the error handler for the drive is set") is None
    assert stated_level("ValueError: bad drive") is None
    assert read_level_subject("[ERROR] nothing named here", lambda text: [], lambda text, at: True) is None
