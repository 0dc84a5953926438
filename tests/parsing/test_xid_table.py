"""The Xid table: every catalogue code resolves, docs/design.md §3's named codes map as stated."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from faultlens.events.diagnosis_record import ACTIONS, FAULT_CLASSES
from faultlens.parsing.xid_table import decode_nvlink, lookup, table
from tools import xid_gen

REFERENCE = Path(os.environ.get("FAULTLENS_XID_REFERENCE", Path(__file__).resolve().parents[3] / "shared" / "reference"))
CATALOG = REFERENCE / "nvidia-xid-catalog.csv"
needs_reference = pytest.mark.skipif(not CATALOG.exists(), reason=f"NVIDIA's catalogue export not at {REFERENCE}")


def _catalog_codes() -> list[int]:
    with CATALOG.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))[1:]
    return [int(r[1]) for r in rows if len(r) > 1 and r[1].strip().isdigit()]


@needs_reference
def test_every_catalogue_code_resolves_to_a_known_entry():
    codes = _catalog_codes()
    assert len(codes) > 150
    for code in codes:
        info = lookup(code)
        assert info.known, code
        assert info.code == code
        assert info.fault in FAULT_CLASSES, (code, info.fault)
        assert info.action in ACTIONS, (code, info.action)
        assert info.severity in ("fatal", "error", "warn", "info")


@needs_reference
def test_committed_table_is_what_the_generator_makes_from_the_catalogue():
    fresh = xid_gen.build_table(CATALOG)
    assert {int(r["code"]): (r["fault"], r["action"], r["nvidia_action"]) for r in fresh} == {
        c: (i.fault, i.action, i.nvidia_action) for c, i in table().items()
    }


@pytest.mark.parametrize(
    "code, fault, action",
    [
        (79, "gpu_lost", "evict"),
        (64, "gpu_memory", "evict_reset_gpu"),
        (95, "gpu_memory", "evict_reset_gpu"),
        (48, "gpu_memory", "evict_reset_gpu"),
        (119, "gpu_reset_required", "evict_reset_gpu"),
        (120, "gpu_reset_required", "evict_reset_gpu"),
        (74, "nvlink", "evict"),
        (13, "app_fault", "reattempt"),
        (31, "app_fault", "reattempt"),
        (94, "gpu_memory", "reattempt"),  # contained ECC: the memory, restart the app
        (63, "gpu_memory", "none"),
        (92, "gpu_memory", "none"),
    ],
)
def test_design_named_codes(code, fault, action):
    info = lookup(code)
    assert (info.fault, info.action) == (fault, action)


def test_nvidia_buckets_are_kept():
    assert lookup(79).nvidia_action == "RESTART_BM"
    assert lookup(95).nvidia_action == "RESET_GPU"
    assert lookup(13).nvidia_action == "RESTART_APP"
    assert lookup(63).nvidia_action == "IGNORE"
    assert lookup(94).memory and lookup(48).memory and not lookup(13).memory


def test_sympathetic_codes_are_not_blamed():
    for code in (43, 45):
        info = lookup(code)
        assert info.sympathetic and info.action == "none", code
    assert not lookup(79).sympathetic


@pytest.mark.parametrize("code", [0, 999, -5, 100000])
def test_unknown_codes_are_unknown_and_do_nothing(code):
    info = lookup(code)
    assert (info.fault, info.action, info.known) == ("unknown", "none", False)


def test_garbage_code_does_not_raise():
    assert lookup("not a number").fault == "unknown"  # type: ignore[arg-type]
    assert lookup(None).action == "none"  # type: ignore[arg-type]


def test_nvlink5_decode_by_intrinfo_and_status():
    # R575+ layout: subcode in IntrInfo[6:0]; 0b0000100 is RLW_REMAP.
    assert decode_nvlink(145, 0x4, 0x100)[:2] == ("RLW_REMAP", "IGNORE")
    assert decode_nvlink(145, 0x4, 0x40)[:2] == ("RLW_REMAP", "RESET_GPU")
    # Older layout: subcode in IntrInfo[9:5] (RLW_REMAP = 0b0010000010).
    assert decode_nvlink(145, 0b0010000010, 0x40)[:2] == ("RLW_REMAP", "RESET_GPU")
    # Several status bits set: the worst bucket wins.
    assert decode_nvlink(145, 0x4, 0x100 | 0x40)[1] == "RESET_GPU"
    # NETIR link down: the reason sits in IntrInfo[25:20]; 0b100110 is IGNORE, 0b000001 RESET_GPU.
    assert decode_nvlink(149, (0b100110 << 20) | 0b0010001)[1] == "IGNORE"
    assert decode_nvlink(149, (0b000001 << 20) | 0b0010001)[1] == "RESET_GPU"


def test_lookup_refines_nvlink5_codes():
    undecoded = lookup(145)
    assert (undecoded.fault, undecoded.action) == ("nvlink", "evict")
    ignore = lookup(145, 0x4, error_status=0x100)
    assert (ignore.fault, ignore.action, ignore.subcode) == ("nvlink", "none", "RLW_REMAP")
    fatal = lookup(145, 0x4, error_status=0x40)
    assert (fatal.action, fatal.severity) == ("evict", "fatal")
    # An IntrInfo that matches no rule keeps the catalogue's conservative default.
    odd = lookup(146, 0x7F, error_status=0x1)
    assert odd.action == "evict"
