"""The Xid table: an NVIDIA Xid code -> what it means and what faultlens does about it.

Data: ``xid_table.csv`` and ``xid_nvlink_decode.csv`` beside this module, generated once from
NVIDIA's catalogue by :mod:`tools.xid_gen` (which documents the policy). ``lookup`` never
raises on a code it does not know: that is fault ``unknown``, action ``none``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Iterable

_HERE = Path(__file__).resolve().parent

# How bad one decoded NVLink5 rule is, to take the worst when several bits of a status are set.
_BUCKET_RANK = {"IGNORE": 0, "XID_154_EVAL": 1, "RESET_GPU": 2}
# docs/design.md §3: NVLink workflows evict; a decode of IGNORE records only; XID_154_EVAL is
# "restart the application unless an Xid 154 says otherwise".
_BUCKET_ACTION = {"IGNORE": "none", "XID_154_EVAL": "reattempt", "RESET_GPU": "evict"}


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    mnemonic: str
    description: str
    nvidia_action: str  # NVIDIA's immediate-action bucket (RESTART_APP, RESET_GPU, ...)
    fault: str  # docs/design.md §9 fault class
    action: str  # events.diagnosis_record.ACTIONS
    severity: str  # fatal, error, warn, info
    sympathetic: bool = False  # a consequence of another error: never blamed on its own
    memory: bool = False  # ECC / row remapping / page retirement
    known: bool = True
    subcode: str | None = None  # NVLink5 unit decoded from IntrInfo (Xid 144-150)


@dataclass(frozen=True, slots=True)
class _DecodeRule:
    xid: int
    unit: str
    revision: str
    mask: int
    value: int
    error_status: int | None
    nvidia_action: str
    severity: str


def _rows(path: Path) -> Iterable[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        yield from csv.DictReader(line for line in fh if not line.startswith("#"))


@lru_cache(maxsize=1)
def table() -> dict[int, XidInfo]:
    """Every code of the catalogue, loaded once."""
    out = {}
    for r in _rows(_HERE / "xid_table.csv"):
        code = int(r["code"])
        out[code] = XidInfo(
            code=code,
            mnemonic=r["mnemonic"],
            description=r["description"],
            nvidia_action=r["nvidia_action"],
            fault=r["fault"],
            action=r["action"],
            severity=r["severity"],
            sympathetic=r["sympathetic"] == "1",
            memory=r["memory"] == "1",
        )
    return out


@lru_cache(maxsize=1)
def _decode_rules() -> dict[int, tuple[_DecodeRule, ...]]:
    out: dict[int, list[_DecodeRule]] = {}
    for r in _rows(_HERE / "xid_nvlink_decode.csv"):
        rule = _DecodeRule(
            xid=int(r["xid"]),
            unit=r["unit"],
            revision=r["revision"],
            mask=int(r["mask"], 16),
            value=int(r["value"], 16),
            error_status=int(r["error_status"], 16) if r["error_status"] else None,
            nvidia_action=r["nvidia_action"],
            severity=r["severity"],
        )
        out.setdefault(rule.xid, []).append(rule)
    return {k: tuple(v) for k, v in out.items()}


def _unit_matches(rule_unit: str, unit: str) -> bool:
    names = {n.strip().upper() for n in rule_unit.replace(" ", "/").split("/") if n.strip()}
    return unit.upper() in names


def _status_matches(rule: _DecodeRule, status: int | None) -> bool:
    if rule.error_status is None or status is None:
        return rule.error_status is None
    if status == rule.error_status:
        return True
    # Most statuses are bit flags: a status with several bits set matches each listed bit.
    return rule.error_status != 0 and status & rule.error_status == rule.error_status and bin(rule.error_status).count("1") == 1


def decode_nvlink(code: int, intrinfo: int, error_status: int | None = None, unit: str | None = None) -> tuple[str, str, str] | None:
    """(unit, NVIDIA bucket, severity) of an Xid 144-150 from its IntrInfo and error status, or None.

    The driver's IntrInfo layout changed in R575 (subcode in bits 6:0 instead of 9:5); a line
    does not say which driver wrote it, so the newer layout is tried first, then the older.
    """
    rules = _decode_rules().get(code, ())
    for revision in ("v2", "v1"):
        hits = [r for r in rules if r.revision == revision and intrinfo & r.mask == r.value]
        if unit:
            hits = [r for r in hits if _unit_matches(r.unit, unit)] or hits
        if not hits:
            continue
        matched = [r for r in hits if _status_matches(r, error_status)]
        if not matched:
            return hits[0].unit, "", ""
        worst = max(matched, key=lambda r: _BUCKET_RANK.get(r.nvidia_action, 2))
        return worst.unit, worst.nvidia_action, worst.severity
    return None


def unknown(code: int) -> XidInfo:
    return XidInfo(
        code=code,
        mnemonic="UNKNOWN",
        description=f"Xid {code} is not in NVIDIA's catalogue",
        nvidia_action="UNKNOWN",
        fault="unknown",
        action="none",
        severity="warn",
        known=False,
    )


def lookup(code: int, intrinfo: int | None = None, *, error_status: int | None = None, unit: str | None = None) -> XidInfo:
    """What Xid ``code`` means; for 144-150, refined by the decode of ``intrinfo`` / ``error_status``."""
    try:
        code = int(code)
    except (TypeError, ValueError):
        return unknown(-1)
    info = table().get(code)
    if info is None:
        return unknown(code)
    if intrinfo is None or code not in _decode_rules():
        return replace(info, subcode=unit) if unit else info
    decoded = decode_nvlink(code, intrinfo, error_status, unit)
    if decoded is None:
        return replace(info, subcode=unit) if unit else info
    sub, bucket, severity = decoded
    if not bucket:  # unit known, status not listed: keep the catalogue's conservative default
        return replace(info, subcode=sub)
    return replace(
        info,
        subcode=sub,
        nvidia_action=bucket,
        action=_BUCKET_ACTION.get(bucket, info.action),
        severity=severity or info.severity,
    )
