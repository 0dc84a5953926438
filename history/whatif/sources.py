"""Where a projection's inputs come from besides the presets: a TOML file (inputs_toml.py),
`faultlens score --json` output (this pipeline's measured detection) and a fault history (measured
rates).

A diagnosis class is mapped onto the scenario's classes (``CLASS_MAP``, docs/ettr.md has the
table): several diagnosis classes may land on one scenario class (their samples pooled), and a
class the scenario lacks is added rather than dropped. Every measured figure carries the number of
samples behind it, and one from fewer than ``MIN_SAMPLES`` is a warning. A latency of 0 s is a
measurement (the fault logged itself); a missing one leaves the scenario's value.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from faultlens.history.whatif.inputs_toml import from_toml  # noqa: F401  (the command's entry point)
from faultlens.history.whatif.model import FaultClass, Scenario
from faultlens.history.whatif.provenance import Input, Kind, mark

log = logging.getLogger(__name__)

MIN_SAMPLES = 5

# diagnosis class -> the scenario classes it may stand for, the first the scenario has wins.
# Record-only and alert classes (clock_skew, telemetry_lost, agent_blind) cost the job nothing.
CLASS_MAP: dict[str, tuple[str, ...]] = {
    "gpu_lost": ("gpu_lost", "cuda_error"),
    "gpu_memory": ("gpu_memory", "gpu_lost", "cuda_error"),
    "nvlink": ("nvlink", "gpu_lost", "cuda_error"),
    "gpu_reset_required": ("gpu_reset_required", "gpu_lost", "cuda_error"),
    "gpu_thermal": ("gpu_thermal", "fail_slow"),
    "app_fault": ("app_fault", "cuda_error", "gpu_lost"),
    "cuda_error": ("cuda_error", "gpu_lost"),
    "nic": ("nic",),
    "nccl_error": ("nccl_error", "nic"),
    "kernel": ("kernel", "host_oom"),
    "host_oom": ("host_oom", "kernel"),
    "storage": ("storage", "kernel"),
    "node_silent": ("node_silent", "gpu_lost", "kernel", "cuda_error"),
    "user_code": ("user_code", "unknown"),
    "nan_loss": ("nan_loss",),
    "loss_spike": ("loss_spike", "nan_loss"),
    "loss_stalled": ("loss_stalled", "nan_loss"),
    "job_hang": ("job_hang",),
    "fail_slow": ("fail_slow",),
    "unknown": ("unknown",),
}
NO_COST = ("clock_skew", "telemetry_lost", "agent_blind")


def target(s: Scenario, fault: str) -> str | None:
    """The scenario class a diagnosis class lands on; None for a class that costs nothing."""
    if fault in NO_COST:
        return None
    names = {f.name for f in s.faults}
    for name in CLASS_MAP.get(fault, (fault,)):
        if name in names:
            return name
    return fault          # added to the scenario as its own class


def read_score(path: str | Path) -> dict[str, dict[str, Any]]:
    """The per-class lines of `faultlens score --json` (the overall line has no ``fault``)."""
    rows: dict[str, dict[str, Any]] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{path}:{i}: not JSON (give the output of `faultlens score --json`)") from None
        if isinstance(row, dict) and "fault" in row:
            for key in ("labels", "detected", "wrong_nodes"):
                v = row.get(key, 0)
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ValueError(f"{path}:{i}: {key} must be an integer >= 0, got {v!r}")
            for key in ("recall", "detection_latency_p50_s"):
                v = row.get(key)
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0):
                    raise ValueError(f"{path}:{i}: {key} must be a number >= 0 or null, got {v!r}")
            rows[str(row["fault"])] = row
    if not rows:
        raise ValueError(f"{path}: no per-class lines of `faultlens score --json`")
    return rows


def _pooled_p50(parts: list[tuple[float, int]]) -> float | None:
    """Several classes' medians as one: weighted by their samples (an approximation of the pooled
    median, which the score's lines do not carry)."""
    n = sum(k for _, k in parts)
    return sum(v * k for v, k in parts) / n if n else None


def _log_warnings(source: str, warnings: list[str]) -> None:
    """One log line for a source's thin measures (the demo's short run had twelve lines of them);
    each stays in the result's ``warnings``, which `faultlens ettr` prints."""
    if warnings:
        log.warning("%s: %d measure(s) from fewer than %d samples, treat them as guesses: %s", source,
                    len(warnings), MIN_SAMPLES, "; ".join(w.split(" (fewer than")[0] for w in warnings))


def _warn(warnings: list[str], what: str, n: int) -> None:
    if n < MIN_SAMPLES:
        warnings.append(f"{what} from {n} sample{'s' if n != 1 else ''} (fewer than {MIN_SAMPLES}): "
                        "treat it as a guess")


def apply_score(s: Scenario, rows: dict[str, dict[str, Any]],
                asked_as: str = "--from-score") -> tuple[Scenario, dict[str, Any]]:
    """Detection as this pipeline measured it. A scored latency runs from the fault's onset to a
    decision that names the machines, so it covers detection and localisation both, except for a
    ``stop_time`` class, whose decision starts the stop-time diagnosis (its ``localise_s`` stays);
    a fault it missed (1 - recall) is left to the framework's timeout and a manual search. Healthy
    machines it blamed, per fault found, become the class's over-eviction."""
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    ignored = []
    for fault, row in sorted(rows.items()):
        name = target(s, fault)
        if name is None or not row.get("labels"):
            ignored.append(fault)
            continue
        groups.setdefault(name, []).append((fault, row))
    used: dict[str, Any] = {}
    warnings: list[str] = []
    for name, members in groups.items():
        labels = sum(r["labels"] for _, r in members)
        detected = sum(min(r.get("detected") or 0, r["labels"]) for _, r in members)
        timed = [(float(r["detection_latency_p50_s"]), min(r.get("detected") or 0, r["labels"]))
                 for _, r in members if r.get("detection_latency_p50_s") is not None]
        p50 = _pooled_p50(timed)
        recall = detected / labels
        if name not in {f.name for f in s.faults}:
            s = replace(s, faults=s.faults + (FaultClass(name, 0.0, detect_s=p50 or 0.0),))
        f = {x.name: x for x in s.faults}[name]
        if f.planned:
            continue
        if p50 is None or not math.isfinite(p50):
            recall, p50 = 0.0, f.detect_s   # nothing timed: as if missed
        wrong = sum(r.get("wrong_nodes") or 0 for _, r in members)
        over = wrong / detected if detected else f.over_evict
        s = s.with_fault(name, detect_s=recall * p50 + (1 - recall) * f.timeout_s,
                         localise_s=recall * (f.localise_s if f.stop_time else 0.0) + (1 - recall) * f.manual_localise_s,
                         over_evict=max(f.over_evict, over))
        source = f"faultlens score: {', '.join(m for m, _ in members)}"
        s = mark(s, f"faults.{name}.detect_s", Input(Kind.MEASURED, source, samples=detected))
        if not f.stop_time:    # the decision names the machines: localisation is in the latency
            s = mark(s, f"faults.{name}.localise_s", Input(Kind.MEASURED, source, samples=detected))
        if detected and over > f.over_evict:
            s = mark(s, f"faults.{name}.over_evict", Input(Kind.MEASURED, source, samples=detected))
        _warn(warnings, f"{name}: detection", detected)
        used[name] = {"from": [m for m, _ in members], "labels": labels, "detected": detected, "recall": recall,
                      "detection_latency_p50_s": p50, "wrong_nodes_per_fault": over, "samples": detected}
    _log_warnings(asked_as, warnings)  # named as the person asked for it: a flag, or the report's projection
    return s, {"measured": used, "not_a_cost": ignored, "warnings": warnings}


def history_running_share(conn) -> float | None:
    """Running time over wall time of the history's jobs (its `ettr` query), or None without one."""
    from faultlens.history import queries

    rows = [r for r in queries.run(conn, "ettr") if r["wall_s"]]
    wall = sum(r["wall_s"] for r in rows)
    return sum(r["productive_s"] for r in rows) / wall if wall else None


def apply_history(s: Scenario, db: str | Path, rates: bool = True) -> tuple[Scenario, dict[str, Any]]:
    """Per-class fault rates (and detection, where the history timed some) measured in a history.

    The history counts faults per wall-clock node-day it watched (each machine from its first event
    to its last); the model's rates are per
    running node-day, so they are divided, once, by the history's own running share. Classes the
    history never saw keep the scenario's rate: a short history saying 'none yet' is no evidence of
    a zero rate. ``rates`` False takes only the detection and keeps the scenario's rates (a short or
    simulated history's rates would swamp a fleet's job); a class the scenario lacks is then left out."""
    import duckdb

    from faultlens.history import queries

    if not Path(db).exists():
        raise ValueError(f"{db}: no such history file")
    try:
        conn = duckdb.connect(str(db), read_only=True)
        rows = queries.run(conn, "fault_rates")
        share = history_running_share(conn)
    except duckdb.Error as exc:
        raise ValueError(f"{db}: not a faultlens history ({str(exc).splitlines()[0]})") from None
    finally:
        if "conn" in locals():
            conn.close()
    factor = 1.0 / share if share and share > 0 else 1.0
    groups: dict[str, list[dict[str, Any]]] = {}
    ignored = []
    for row in rows:
        name = target(s, row["fault"])
        if name is None or row["rate_per_node_day"] is None:
            ignored.append(row["fault"])
            continue
        groups.setdefault(name, []).append(row)
    used: dict[str, Any] = {}
    warnings: list[str] = []
    left_out: list[str] = []
    for name, members in groups.items():
        faults = sum(r["faults"] for r in members)
        rate = sum(r["rate_per_node_day"] for r in members) * factor
        p50 = _pooled_p50([(r["detection_p50_s"], r["faults"]) for r in members if r["detection_p50_s"] is not None])
        if name not in {f.name for f in s.faults}:
            if not rates:
                left_out.extend(r["fault"] for r in members)
                continue
            s = replace(s, faults=s.faults + (FaultClass(name, rate, detect_s=p50 or 0.0),))
        changes: dict[str, Any] = {"rate": rate} if rates else {}
        if p50 is not None:
            changes.update(detect_s=p50, localise_s=0.0)
        s = s.with_fault(name, **changes)
        source = f"history {db}: {', '.join(r['fault'] for r in members)}"
        if rates:
            s = mark(s, f"faults.{name}.rate", Input(Kind.MEASURED, source, samples=faults))
        if p50 is not None:
            s = mark(s, f"faults.{name}.detect_s", Input(Kind.MEASURED, source, samples=faults))
            s = mark(s, f"faults.{name}.localise_s", Input(Kind.MEASURED, source, samples=faults))
        _warn(warnings, f"{name}: {'rate and detection' if rates else 'detection'}", faults)
        first = members[0]
        used[name] = {"from": [r["fault"] for r in members], "faults": faults, "nodes": first["nodes"],
                      "days": first["days"], "node_days": first["node_days"],
                      "rate_per_node_day": rate if rates else None, "rate_per_wall_node_day": rate / factor if rates else None,
                      "detection_p50_s": p50, "samples": faults}
    _log_warnings("--from-history", warnings)
    return s, {"measured": used, "running_share": share, "not_a_cost": ignored, "warnings": warnings,
               "rates": "history" if rates else "kept", "left_out": left_out}
