"""Disk and host memory: enough free space on the checkpoint / work path and a file can be written
there; enough memory available. ``read_*`` touch the machine, ``judge_*`` are pure."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from faultlens.collectors.checks.result import CheckResult

DISK = "disk"
MEMORY = "memory"
_GB = 1024 ** 3
PROBE_BYTES = 1 << 20


@dataclass(frozen=True)
class DiskSnapshot:
    path: str
    free_bytes: int
    total_bytes: int
    write_error: str = ""  # empty when a probe file was written, synced, read back and removed


def read_disk(path: str | os.PathLike[str]) -> DiskSnapshot:
    p = Path(path)
    try:
        usage = shutil.disk_usage(p)
    except OSError as exc:
        return DiskSnapshot(str(p), 0, 0, f"cannot stat: {exc}")
    return DiskSnapshot(str(p), usage.free, usage.total, _probe_write(p))


def _probe_write(folder: Path) -> str:
    body = os.urandom(PROBE_BYTES)
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".faultlens-check-") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
            f.seek(0)
            if f.read() != body:
                return "probe file read back differs from what was written"
    except OSError as exc:
        return f"cannot write a probe file: {exc}"
    return ""


def judge_disk(snaps: list[DiskSnapshot], min_free_bytes: int = 10 * _GB, min_free_frac: float = 0.02) -> CheckResult:
    problems, fine = [], []
    for s in snaps:
        if s.write_error:
            problems.append(f"{s.path}: {s.write_error}")
            continue
        frac = s.free_bytes / s.total_bytes if s.total_bytes else 0.0
        if s.free_bytes < min_free_bytes or frac < min_free_frac:
            problems.append(f"{s.path}: {s.free_bytes / _GB:.1f} GiB free ({frac:.1%}), "
                            f"needs {min_free_bytes / _GB:.1f} GiB and {min_free_frac:.0%}")
        else:
            fine.append(f"{s.path}: {s.free_bytes / _GB:.1f} GiB free")
    if problems:
        return CheckResult(DISK, False, "; ".join(problems))
    return CheckResult(DISK, True, "; ".join(fine) or "no path to check")


@dataclass(frozen=True)
class MemorySnapshot:
    available_bytes: int
    total_bytes: int


def parse_meminfo(text: str) -> MemorySnapshot:
    """``/proc/meminfo`` → available / total. Raises ValueError when either line is missing."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name.strip()] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    if "MemTotal" not in fields or "MemAvailable" not in fields:
        raise ValueError("meminfo lacks MemTotal or MemAvailable (kernel older than 3.14?)")
    return MemorySnapshot(fields["MemAvailable"], fields["MemTotal"])


def read_memory(path: str = "/proc/meminfo") -> MemorySnapshot:
    return parse_meminfo(Path(path).read_text())


def judge_memory(snap: MemorySnapshot, min_available_frac: float = 0.10) -> CheckResult:
    frac = snap.available_bytes / snap.total_bytes if snap.total_bytes else 0.0
    detail = f"{snap.available_bytes / _GB:.1f} of {snap.total_bytes / _GB:.1f} GiB available ({frac:.0%})"
    if frac < min_available_frac:
        return CheckResult(MEMORY, False, f"{detail}, needs {min_available_frac:.0%}")
    return CheckResult(MEMORY, True, detail)
