"""Diagnosis.rule (issue 55): the rule that made a finding rides on the record when set, and a record
without it is byte for byte what it was (tests/events/test_record_enums.py holds those bytes)."""

from __future__ import annotations

import orjson

from faultlens.events.diagnosis_record import Diagnosis
from tests.events.test_record_enums import BEFORE, RECORD


def test_a_record_without_a_rule_keeps_its_bytes_and_id():
    d = Diagnosis(fault="gpu_memory", action="evict_reset_gpu", **RECORD)
    assert d.rule is None and d.encode() == BEFORE
    assert Diagnosis.decode(BEFORE).rule is None


def test_a_rule_round_trips_and_leaves_the_id_alone():
    plain = Diagnosis(fault="gpu_memory", action="evict_reset_gpu", **RECORD)
    ruled = Diagnosis(fault="gpu_memory", action="evict_reset_gpu", rule="xid.48", **RECORD)
    assert ruled.id == plain.id  # the id is what was decided, not which rule said it
    assert orjson.loads(ruled.encode())["rule"] == "xid.48"
    assert Diagnosis.decode(ruled.encode()) == ruled
