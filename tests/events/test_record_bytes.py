"""The records on the bus keep their bytes (issue 57): tests/fixtures/records/record_bytes.jsonl holds
commands (unsigned and signed), action records and diagnoses as the hand-written to_dict/orjson code
wrote them (its first line names the commit). Built from the same fields today, each encodes to those
bytes (a command's signed canonical bytes too), and the old bytes decode to a record that encodes them
again; a command signed then verifies under the public key the fixture kept, and an altered one does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from faultlens.events.action_record import ActionRecord
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.signing import SigningKey, VerifyKeys

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "record_bytes.jsonl"
_HEAD, *ROWS = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]
KEYS = VerifyKeys.from_pem([("record_bytes.jsonl", _HEAD["verify_key"].encode())])
TYPES: dict[str, Any] = {"Command": Command, "SignedCommand": Command, "ActionRecord": ActionRecord, "Diagnosis": Diagnosis}
_TUPLES = ("nodes", "ranks", "evidence")


def _build(row: dict[str, Any]) -> Any:
    args = {k: tuple(v) if k in _TUPLES else v for k, v in row["args"].items()}
    return TYPES[row["record"]](**args)


def _rows(*kinds: str) -> list[dict[str, Any]]:
    return [r for r in ROWS if r["record"] in kinds]


def _id(row: dict[str, Any]) -> str:
    return f"{row['record']}:{row['args'].get('id') or row['args']['job']}"


def test_the_fixture_holds_every_record():
    assert {r["record"] for r in ROWS} == set(TYPES) and len(ROWS) >= 15


@pytest.mark.parametrize("row", _rows("Command", "ActionRecord", "Diagnosis"), ids=_id)
def test_a_record_built_from_the_same_fields_encodes_to_the_same_bytes(row):
    record = _build(row)
    assert record.encode() == row["bytes"].encode()
    if "canonical" in row:
        assert record.canonical() == row["canonical"].encode()


@pytest.mark.parametrize("row", _rows("Command", "SignedCommand", "ActionRecord"), ids=_id)
def test_old_bytes_decode_and_encode_again(row):
    raw = row["bytes"].encode()
    record = TYPES[row["record"]].decode(raw)
    assert record.encode() == raw
    assert type(record).from_dict(record.to_dict()) == record
    if row["record"] in ("Command", "ActionRecord"):  # a diagnosis's confidence goes on the bus rounded
        assert record == _build(row)


@pytest.mark.parametrize("row", _rows("SignedCommand"), ids=_id)
def test_a_command_signed_by_the_old_code_verifies(row):
    command = Command.decode(row["bytes"].encode())
    assert command.canonical() == row["canonical"].encode()
    assert command.signature_problem(KEYS) is None
    altered = orjson.loads(row["bytes"])
    altered["reason"] = altered["reason"] + "!"
    assert "bad signature" in (Command.from_dict(altered).signature_problem(KEYS) or "")


def test_a_command_signed_now_verifies_after_the_bus():
    key = SigningKey.generate()
    for row in _rows("Command"):
        sent = _build(row).signed(key)
        received = Command.decode(sent.encode())
        assert received == sent and received.verify(key.verify_keys()) and not received.verify(KEYS)


@pytest.mark.parametrize("row", _rows("Diagnosis"), ids=_id)
def test_old_diagnoses_decode_as_the_old_code_read_them(row):
    # A diagnosis carries no signature: its times read as floats, as the hand-written float() read them.
    raw = row["bytes"].encode()
    d = Diagnosis.decode(raw)
    old = orjson.loads(raw)
    assert type(d.ts) is float and type(d.onset) is float
    assert d.to_dict() == {**old, "ts": float(old["ts"]), "onset": float(old["onset"])}
    assert Diagnosis.from_dict(d.to_dict()) == d
    if type(old["ts"]) is float and type(old["onset"]) is float:
        assert d.encode() == raw
