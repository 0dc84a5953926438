"""Where a projection's inputs come from besides the presets: a TOML file, `faultlens score --json`
output (this pipeline's measured detection) and a fault history (measured rates).

Each returns a new Scenario (the dataclasses are frozen) and a note of what it changed, which the
command prints under ``inputs`` so a reader sees which numbers were measured and which assumed.
"""

from __future__ import annotations

import json
import logging
import math
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from faultlens.history.whatif.model import FaultClass, Recovery, Scenario, fault_from_mapping

log = logging.getLogger(__name__)

_SCALARS = {"gpus": int, "gpus_per_node": int, "days": float, "checkpoint_interval_s": float,
            "checkpoint_stall_s": float, "spares": int, "spare_return_days": float, "name": str}


def from_toml(path: str | Path, base: Scenario | None) -> Scenario:
    """A scenario from TOML: top-level scalars (``_SCALARS``), a ``[recovery]`` table and
    ``[[faults]]`` tables. Without ``[[faults]]`` the base's classes stay; a ``[faults.NAME]`` table
    changes one of the base's classes."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    unknown = set(data) - set(_SCALARS) - {"recovery", "faults"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    changes: dict[str, Any] = {}
    for key, kind in _SCALARS.items():
        if key in data:
            try:
                changes[key] = kind(data[key])
            except (TypeError, ValueError):
                raise ValueError(f"{path}: {key} must be a {kind.__name__}, got {data[key]!r}") from None
    if "recovery" in data:
        fields = set(Recovery.__dataclass_fields__)
        if not isinstance(data["recovery"], dict) or set(data["recovery"]) - fields:
            raise ValueError(f"{path}: [recovery] takes {sorted(fields)}")
        changes["recovery"] = replace(base.recovery if base else Recovery(),
                                      **{k: float(v) for k, v in data["recovery"].items()})
    faults = data.get("faults")
    if isinstance(faults, list):
        changes["faults"] = tuple(fault_from_mapping(f) for f in faults)
    elif isinstance(faults, dict):
        if base is None:
            raise ValueError(f"{path}: [faults.NAME] changes a preset's class; give --preset or [[faults]]")
        scenario = base
        for name, table in faults.items():
            try:
                scenario = scenario.with_fault(name, **{k: v for k, v in table.items()})
            except KeyError:
                raise ValueError(f"{path}: no fault class {name!r} in the preset") from None
            except TypeError as exc:
                raise ValueError(f"{path}: [faults.{name}]: {exc}") from None
        base = scenario
    elif faults is not None:
        raise ValueError(f"{path}: faults must be [[faults]] tables or [faults.NAME] tables")
    if base is None:
        if "faults" not in changes or "gpus" not in changes or "days" not in changes:
            raise ValueError(f"{path}: without a preset the file needs gpus, days and [[faults]]")
        return Scenario(**changes)
    return replace(base, **changes)


def read_score(path: str | Path) -> dict[str, dict[str, Any]]:
    """The per-class lines of `faultlens score --json` (the overall line has no ``fault``)."""
    rows: dict[str, dict[str, Any]] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: {exc}") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{path}:{i}: not JSON (give the output of `faultlens score --json`)") from None
        if isinstance(row, dict) and "fault" in row:
            rows[row["fault"]] = row
    if not rows:
        raise ValueError(f"{path}: no per-class lines of `faultlens score --json`")
    return rows


def apply_score(s: Scenario, rows: dict[str, dict[str, Any]]) -> tuple[Scenario, dict[str, Any]]:
    """Detection as this pipeline measured it. A scored latency runs from the fault's onset to a
    decision that names the machines, so it covers detection and localisation both, except for a
    ``stop_time`` class, whose decision starts the stop-time diagnosis (its ``localise_s`` stays);
    a fault it missed (1 - recall) is left to the framework's timeout and a manual search. Healthy
    machines it blamed, per fault found, become the class's over-eviction."""
    used: dict[str, Any] = {}
    for f in s.faults:
        row = rows.get(f.name)
        if row is None or f.planned or not row.get("labels"):
            continue
        recall = row.get("recall") or 0.0
        p50 = row.get("detection_latency_p50_s")
        if p50 is None or not math.isfinite(p50) or p50 < 0:
            recall, p50 = 0.0, 0.0
        detected = row.get("detected") or 0
        over = (row.get("wrong_nodes") or 0) / detected if detected else f.over_evict
        s = s.with_fault(f.name, detect_s=recall * p50 + (1 - recall) * f.timeout_s,
                         localise_s=recall * (f.localise_s if f.stop_time else 0.0) + (1 - recall) * f.manual_localise_s,
                         over_evict=max(f.over_evict, over))
        used[f.name] = {"recall": recall, "detection_latency_p50_s": p50, "wrong_nodes_per_fault": over}
    missing = sorted(set(rows) - {f.name for f in s.faults})
    if missing:
        log.info("score classes not in the scenario (kept out): %s", ", ".join(missing))
    return s, {"measured": used, "not_in_scenario": missing}


def apply_history(s: Scenario, db: str | Path) -> tuple[Scenario, dict[str, Any]]:
    """Per-class fault rates (and detection, where the history shows some) measured in a history.
    Classes the history never saw keep the scenario's rate: a short history saying 'none yet' is no
    evidence of a zero rate."""
    import duckdb

    from faultlens.history import queries

    if not Path(db).exists():
        raise ValueError(f"{db}: no such history file")
    try:
        conn = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as exc:
        raise ValueError(f"{db}: {exc}") from None
    try:
        rows = queries.run(conn, "fault_rates")
    finally:
        conn.close()
    names = {f.name for f in s.faults}
    used: dict[str, Any] = {}
    added: list[FaultClass] = []
    for row in rows:
        rate = row["rate_per_node_day"]
        if rate is None:
            continue
        detect = row["detection_p50_s"] or 0.0
        if row["fault"] in names:
            s = s.with_fault(row["fault"], rate=rate, detect_s=detect, localise_s=0.0)
        else:
            added.append(FaultClass(row["fault"], rate, detect_s=detect))
        used[row["fault"]] = {"faults": row["faults"], "nodes": row["nodes"], "days": row["days"],
                              "rate_per_node_day": rate, "detection_p50_s": detect}
    if added:
        s = replace(s, faults=s.faults + tuple(added))
    return s, {"measured": used}
