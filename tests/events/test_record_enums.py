"""The records' names are StrEnums (issue 48): a diagnosis's fault and action (FaultClass, Action)
and a command's action (CommandAction), converted at construction; the records on the bus (and a
command's signed bytes) are byte for byte what they were when these were plain strings."""

from __future__ import annotations

import pytest

from faultlens.events.command import Command, CommandAction
from faultlens.events.diagnosis_record import Action, Diagnosis, FaultClass
from faultlens.events.envelope import InvalidEvent

# Written by the record of commit ca126e1 (fault and action plain strings) for RECORD below: the id
# is the hash of what was decided, fault and action included, so it must not move either.
BEFORE = (b'{"id":"9e9d22dab04b304becbeb285976d5752","job":"job-7","ts":1700000123.5,"onset":1700000100.25,'
          b'"fault":"gpu_memory","nodes":["node-3"],"ranks":[12,13],"group":"dp:1","confidence":0.875,'
          b'"action":"evict_reset_gpu","evidence":["ev-1","ev-2"],"detail":"Xid 48 on GPU 0000:3b:00.0","count":2}')
RECORD = dict(job="job-7", ts=1700000123.5, onset=1700000100.25, nodes=("node-3",), ranks=(12, 13), group="dp:1",
              confidence=0.875, evidence=("ev-1", "ev-2"), detail="Xid 48 on GPU 0000:3b:00.0", count=2)


@pytest.mark.parametrize("fault, action", [("gpu_memory", "evict_reset_gpu"),
                                           (FaultClass.GPU_MEMORY, Action.EVICT_RESET_GPU)])
def test_a_record_encodes_to_the_bytes_it_had_with_plain_strings(fault, action):
    d = Diagnosis(fault=fault, action=action, **RECORD)
    assert d.encode() == BEFORE
    assert type(d.fault) is FaultClass and type(d.action) is Action


def test_a_decoded_record_holds_members_and_round_trips():
    d = Diagnosis.decode(BEFORE)
    assert d.fault is FaultClass.GPU_MEMORY and d.action is Action.EVICT_RESET_GPU
    assert d.fault == "gpu_memory" and d.action == "evict_reset_gpu"  # a member equals its name
    assert d.encode() == BEFORE


@pytest.mark.parametrize("field, value, reason", [
    ("fault", "gpu_melted", "unknown fault class 'gpu_melted'"),
    ("action", "reboot_everything", "unknown action 'reboot_everything'"),
    ("fault", None, "unknown fault class None"),
    ("action", 3, "unknown action 3"),
    ("fault", "evict", "unknown fault class 'evict'"),  # an action's name is no fault class
])
def test_an_unknown_name_is_refused_naming_the_field(field, value, reason):
    fields = {"fault": "gpu_memory", "action": "evict_reset_gpu", **RECORD, field: value}
    with pytest.raises(InvalidEvent) as err:
        Diagnosis(**fields)
    assert err.value.field == field and str(err.value) == f"{field}: {reason}"


# The same for the command record, whose signature covers these bytes (commit ca126e1 wrote them).
COMMAND_BEFORE = (b'{"id":"cmd-1","job":"job-7","action":"run_checks","nodes":["node-3","node-4"],"ranks":[5],'
                  b'"reason":"stop-time checks","diagnosis_id":"9e9d22dab04b304becbeb285976d5752","issued_at":1700000123.5,'
                  b'"expires_at":1700000423.5,"params":{"checks":["gpu_burn"]},"key_id":"k1","signature":"c2ln"}')
COMMAND_SIGNED = (b'{"action":"run_checks","diagnosis_id":"9e9d22dab04b304becbeb285976d5752","expires_at":1700000423.5,'
                  b'"id":"cmd-1","issued_at":1700000123.5,"job":"job-7","key_id":"k1","nodes":["node-3","node-4"],'
                  b'"params":{"checks":["gpu_burn"]},"ranks":[5],"reason":"stop-time checks"}')


@pytest.mark.parametrize("action", ["run_checks", CommandAction.RUN_CHECKS])
def test_a_command_encodes_and_signs_the_bytes_it_had_with_a_plain_string(action):
    c = Command(id="cmd-1", job="job-7", action=action, nodes=("node-3", "node-4"), ranks=(5,), reason="stop-time checks",
                diagnosis_id="9e9d22dab04b304becbeb285976d5752", issued_at=1700000123.5, expires_at=1700000423.5,
                params={"checks": ["gpu_burn"]}, key_id="k1", signature="c2ln")
    assert type(c.action) is CommandAction
    assert c.encode() == COMMAND_BEFORE and c.canonical() == COMMAND_SIGNED
    assert Command.decode(COMMAND_BEFORE).action is CommandAction.RUN_CHECKS


@pytest.mark.parametrize("action", ["reboot", None, "gpu_lost"])
def test_an_unknown_command_action_is_refused_naming_the_field(action):
    with pytest.raises(InvalidEvent) as err:
        Command(job="job-7", action=action, issued_at=1700000123.5, expires_at=1700000423.5)
    assert str(err.value) == f"action: unknown command action {action!r}"
