"""What `faultlens nodes list|show` print of the fleet records (pure: records in, rows and lines out)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable

from faultlens.events.fleet_record import MachineRecord


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def summary(r: MachineRecord, now: float, clean_s: float) -> dict[str, Any]:
    """One machine in one row: state, what counted against it, its evictions and lemon verdict."""
    counted = r.counted()
    lemon = r.lemon
    outcomes = r.eviction_outcomes(now, clean_s)
    span = (max(f["ts"] for f in counted) - min(f["ts"] for f in counted)) if len(counted) > 1 else None
    return {
        "node": r.node, "state": r.state(), "faults": len(r.faults), "counted": len(counted),
        "jobs": len({f["job"] for f in counted}), "classes": sorted({f["fault"] for f in counted}),
        "failed_checks": sum(1 for c in r.checks if c.get("failed")),
        "passed_checks": sum(1 for c in r.checks if c.get("passed")),
        "evictions": len(r.evictions), "ran_clean": sum(o["outcome"] == "ran_clean" for o in outcomes),
        "failed_again": sum(o["outcome"] == "failed_again" for o in outcomes),
        # Between its counted failures (None with fewer than two): how often it breaks a job.
        "mtbf_s": span / (len(counted) - 1) if span else None,
        "last_fault_ts": max((f["ts"] for f in r.faults), default=None),
        "lemon_rule": lemon["rule"] if lemon else None, "lemon_at": lemon["ts"] if lemon else None,
        "updated": r.updated,
    }


def detail(r: MachineRecord, now: float, clean_s: float) -> dict[str, Any]:
    """The whole record, evictions with how they ended (``show --json``)."""
    return {**r.to_dict(), "summary": summary(r, now, clean_s), "evictions": r.eviction_outcomes(now, clean_s),
            "lemon": r.lemon}


def list_lines(rows: Iterable[dict[str, Any]]) -> list[str]:
    rows = list(rows)
    if not rows:
        return ["no machine in the fleet record yet (remediation writes it as it decides)"]
    head = f"{'NODE':<20} {'STATE':<20} {'COUNTED':>7} {'JOBS':>4} {'FAULTS':>6} {'FAILCHK':>7} {'EVICTED':>7}  LEMON"
    out = [head]
    for s in rows:
        lemon = f"{s['lemon_rule']} since {_when(s['lemon_at'])}" if s["lemon_rule"] else ""
        out.append(f"{s['node']:<20} {s['state']:<20} {s['counted']:>7} {s['jobs']:>4} {s['faults']:>6} "
                   f"{s['failed_checks']:>7} {s['evictions']:>7}  {lemon}")
    return out


def show_lines(r: MachineRecord, now: float, clean_s: float) -> list[str]:
    s = summary(r, now, clean_s)
    out = [f"{r.node}: {s['state']} (record updated {_when(r.updated)})"]
    lemon = r.lemon
    if lemon:
        out.append(f"  lemon since {_when(lemon['ts'])} ({lemon['rule']}): {lemon.get('reason', '')}")
        if lemon.get("mode", "act") != "act":
            out.append(f"  not drained: job {lemon.get('job')} was in {lemon['mode']} mode when it became one")
        out.append(f"  back only by a person: faultlens nodes resume {r.node} --actuator ...")
    out.append(f"  faults: {s['faults']} recorded, {s['counted']} counted against it"
               + (f" ({', '.join(s['classes'])} in {s['jobs']} job(s))" if s["counted"] else ""))
    for f in r.faults[-20:]:
        why = "counts" if f.get("counts") else f"not counted: {f.get('why', '')}"
        out.append(f"    {_when(f['ts'])}  {f['job']:<16} {f['fault']:<18} {f['diagnosis_id']}  {why}")
    if r.checks:
        out.append(f"  stop-time checks: {s['passed_checks']} passed, {s['failed_checks']} failed")
        for c in r.checks[-10:]:
            verdict = "FAILED " + ",".join(c.get("checks") or []) if c.get("failed") else (
                "passed" if c.get("passed") else "could not run")
            out.append(f"    {_when(c['ts'])}  {c['job']:<16} {verdict}  (diagnosis {c.get('diagnosis_id', '')})")
    if r.evictions:
        out.append(f"  evictions: {len(r.evictions)}")
        for e in r.eviction_outcomes(now, clean_s)[-10:]:
            out.append(f"    {_when(e['ts'])}  {e['job']:<16} {e.get('fault', ''):<18} {e['outcome']}"
                       + (f" (back {_when(e['back_ts'])})" if e.get("back_ts") else ""))
    for res in r.resumes[-10:]:
        out.append(f"  resumed by {res.get('by', '?')} at {_when(res['ts'])}: {res.get('reason', '')}")
    return out
