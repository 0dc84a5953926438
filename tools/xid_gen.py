"""Generate faultlens's Xid tables from NVIDIA's Xid catalogue (run once; the output is committed).

    .venv/bin/python -m tools.xid_gen REFERENCE_DIR   # NVIDIA's Xid catalogue export (CSV)

reads NVIDIA's catalogue export (``nvidia-xid-catalog.csv``, ``nvidia-xid-144-150-decode.csv``)
and writes the project's own tables beside this module:

* ``xid_table.csv``: code, mnemonic, description, nvidia_action (NVIDIA's immediate-action
  bucket), fault (docs/design.md §9), action (``events.diagnosis_record.ACTIONS``), severity, sympathetic,
  memory (an ECC / row-remap / retirement code).
* ``xid_nvlink_decode.csv``: the NVLink5 Xids 144-150 decoded from IntrInfo and the error
  status: xid, unit, revision (v1 = drivers before R575, IntrInfo[9:5]; v2 = R575+, IntrInfo[6:0]),
  mask and value over IntrInfo (hex), error_status (hex, empty = any), nvidia_action, severity.

The policy (NVIDIA bucket -> fault, action, severity) lives here, in :func:`policy`, so a change
to it is one reviewed edit plus a regeneration. docs/design.md §3 decides the named codes:

* RESTART_BM (79, fallen off the bus) -> gpu_lost, evict.
* RESET_GPU and WORKFLOW_XID_48 -> evict_reset_gpu. The fault is gpu_memory for memory codes
  (48 DBE, 64 remap failure, 95 uncontained, 140 ECC escape, 156 retirement, 168, 171, 172) and
  gpu_reset_required for the rest (46, 62, 109, 110, 119, 120, 136, 143, 155, 158, ...).
* WORKFLOW_NVLINK_ERR (74) and WORKFLOW_NVLINK5_ERR (144-150) -> nvlink, evict; 144-150 are
  refined by the decode table when the line carries IntrInfo (an IGNORE decode records only).
* RESTART_APP -> app_fault, reattempt (13, 31 ...); a memory code among them (94, contained ECC
  error) is gpu_memory, reattempt: the memory's fault, a restart clears it, a repeat evicts.
* IGNORE -> action none (record only): 63 (remap event) and 92 (high SBE rate) are gpu_memory.
* WORKFLOW_XID_45 (45) and 43 after 13 are sympathetic: app_fault, none, never blamed alone.
* Unused codes (NVIDIA: CONTACT_SUPPORT, "Unused") -> unknown, none.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

# The generated tables live beside their reader, parsing/xid_table.py.
OUT_DIR = Path(__file__).resolve().parents[1] / "parsing"
TABLE = OUT_DIR / "xid_table.csv"
DECODE = OUT_DIR / "xid_nvlink_decode.csv"

TABLE_COLUMNS = ("code", "mnemonic", "description", "nvidia_action", "fault", "action", "severity", "sympathetic", "memory")
DECODE_COLUMNS = ("xid", "unit", "revision", "mask", "value", "error_status", "nvidia_action", "severity")

MEMORY_CODES = frozenset({48, 63, 64, 92, 94, 95, 140, 156, 157, 168, 171, 172})
SYMPATHETIC_CODES = frozenset({43, 45, 154, 159})

# Codes NVIDIA leaves without an immediate bucket (new in R575+) or whose bucket is a workflow
# that says "look elsewhere": faultlens's own reading of their description.
OVERRIDES: dict[int, tuple[str, str, str]] = {
    43: ("app_fault", "none", "info"),  # GPU stopped processing after a user fault: follows Xid 13
    45: ("app_fault", "none", "info"),  # preemptive cleanup, due to previous errors
    54: ("unknown", "inspect_hardware", "error"),  # auxiliary power not connected
    78: ("unknown", "none", "warn"),  # vGPU start error: a software/firmware mismatch
    151: ("app_fault", "restart", "error"),  # confidential-computing key rotation: restart the VM
    154: ("unknown", "none", "info"),  # recovery action changed: informs about another Xid
    159: ("unknown", "none", "warn"),  # CHI non-data error: sympathetic unless UVM is in use
    162: ("gpu_thermal", "none", "info"),  # power smoothing re-engaged
    163: ("gpu_thermal", "none", "warn"),  # power smoothing disengaged
    164: ("gpu_thermal", "none", "warn"),  # power smoothing circuitry near end of life
    165: ("gpu_thermal", "inspect_hardware", "error"),  # power smoothing lifetime exhausted
    166: ("nvlink", "none", "warn"),  # CC traffic before the link was secured
    167: ("gpu_lost", "evict", "fatal"),  # PCIe fatal timeout
    168: ("gpu_memory", "evict_reset_gpu", "error"),  # errors in the write-protected region
    169: ("gpu_reset_required", "evict_reset_gpu", "fatal"),  # SEC2 micro-controller halt
    170: ("nvlink", "none", "warn"),  # interrupt seen in CC mode
    171: ("gpu_memory", "evict_reset_gpu", "fatal"),  # DRAM detail of an Xid 48
    172: ("gpu_memory", "evict_reset_gpu", "fatal"),  # SRAM detail of an Xid 48
}


def policy(code: int, bucket: str, description: str) -> tuple[str, str, str]:
    """(fault, action, severity) for one catalogue row."""
    if code in OVERRIDES:
        return OVERRIDES[code]
    memory = code in MEMORY_CODES
    if bucket == "RESTART_BM":
        return "gpu_lost", "evict", "fatal"
    if bucket in ("RESET_GPU", "WORKFLOW_XID_48"):
        return ("gpu_memory" if memory else "gpu_reset_required"), "evict_reset_gpu", "fatal"
    if bucket in ("WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR"):
        return "nvlink", "evict", "fatal"
    if bucket == "RESTART_APP":
        if memory:
            # 94: a contained ECC error is the GPU's memory, not the program; NVIDIA says restart the
            # application, and dedup escalates a repeat on the same GPU to an eviction.
            return "gpu_memory", "reattempt", "error"
        return "app_fault", "reattempt", "error"
    if bucket == "IGNORE":
        if memory:
            return "gpu_memory", "none", "warn"
        if "NVLINK" in description.upper() or code == 137:
            return "nvlink", "none", "info"
        return "unknown", "none", "info"
    if description.strip().lower() == "unused":
        return "unknown", "none", "info"
    return "unknown", "none", "warn"


def _clean(text: str) -> str:
    return " ".join(text.split())


def _pattern(bits: str) -> tuple[str, str] | None:
    """A '-'-wildcard bit pattern (msb first) as (mask, value) hex strings."""
    bits = bits.strip()
    if not bits or set(bits) - set("01-"):
        return None
    mask = value = 0
    for i, ch in enumerate(reversed(bits)):
        if ch != "-":
            mask |= 1 << i
            value |= (ch == "1") << i
    return f"0x{mask:08x}", f"0x{value:08x}"


def _severity(text: str) -> str:
    text = text.lower()
    return "warn" if "non-fatal" in text else "fatal" if "fatal" in text else "warn"


def build_table(catalog: Path) -> list[dict[str, str]]:
    rows = []
    with catalog.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        next(reader)
        for rec in reader:
            if len(rec) < 9 or not rec[1].strip().isdigit():
                continue
            code = int(rec[1])
            mnemonic = _clean(rec[2]).split(" / ")[0]
            description = _clean(rec[3])
            bucket = _clean(rec[8])
            fault, action, severity = policy(code, bucket, description)
            rows.append(
                {
                    "code": str(code),
                    "mnemonic": mnemonic,
                    "description": description[:160],
                    "nvidia_action": bucket or "NONE_GIVEN",
                    "fault": fault,
                    "action": action,
                    "severity": severity,
                    "sympathetic": "1" if code in SYMPATHETIC_CODES else "0",
                    "memory": "1" if code in MEMORY_CODES else "0",
                }
            )
    return rows


def build_decode(decode: Path) -> list[dict[str, str]]:
    rows = []
    with decode.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        next(reader)
        for rec in reader:
            if len(rec) < 11 or not rec[0].strip().isdigit():
                continue
            xid, unit = rec[0].strip(), _clean(rec[1])
            statuses = [s.strip() for s in rec[4].split("/") if s.strip()] or [""]
            variants = [(rec[2], rec[3], _clean(rec[5]))]
            if rec[8].strip():  # "Action 2": a second IntrInfo pattern with its own bucket
                variants.append((rec[6], rec[7], _clean(rec[8])))
            for v1, v2, bucket in variants:
                for revision, bits in (("v2", v2), ("v1", v1)):
                    pat = _pattern(bits)
                    if pat is None:
                        continue
                    for status in statuses:
                        rows.append(
                            {
                                "xid": xid,
                                "unit": unit,
                                "revision": revision,
                                "mask": pat[0],
                                "value": pat[1],
                                "error_status": status.lower(),
                                "nvidia_action": bucket,
                                "severity": _severity(rec[10]),
                            }
                        )
    return rows


def _write(path: Path, columns: tuple[str, ...], rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        fh.write("# generated by tools/xid_gen.py from NVIDIA's Xid catalogue; edit the policy there\n")
        writer = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tools.xid_gen REFERENCE_DIR", file=sys.stderr)
        return 2
    ref = Path(argv[0])
    table = build_table(ref / "nvidia-xid-catalog.csv")
    decode = build_decode(ref / "nvidia-xid-144-150-decode.csv")
    _write(TABLE, TABLE_COLUMNS, table)
    _write(DECODE, DECODE_COLUMNS, decode)
    print(f"wrote {len(table)} codes to {TABLE.name}, {len(decode)} decode rules to {DECODE.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
