"""The demo's end report: what was injected, what was found and done about it, what was wrongly
blamed, the jobs' ETTR from the fault history, and where the history and plots were written."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import IO, Any, Iterable, Mapping

import orjson
from rich.console import Console
from rich.table import Table

from simulator import EPISODE_S
from streams.diagnosis_record import Diagnosis
from diagnosis.scoring import score
from faultlens.demo.state import DemoState

RESTARTING = ("evict", "restart", "reattempt", "rollback")


def _matches(d: Diagnosis, label: Mapping[str, Any]) -> bool:
    # score() on one pair applies the project's matching rule (class, job, time window, nodes).
    return not score([d], [label]).missed


def injected(state: DemoState, labels: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per injected fault: its first matching diagnosis, the command it led to, timings."""
    diags = sorted((d for d in state.diagnoses if d.job == state.sim_job), key=lambda d: d.ts)
    obeyed = [c for c in state.commands if c.accepted and c.command is not None]
    rows = []
    for lab in labels:
        matched = [d for d in diags if _matches(d, lab)]
        row: dict[str, Any] = {"fault": lab["fault"], "nodes": list(lab.get("nodes") or ()),
                               "onset_s": round(float(lab["onset"]) - state.sim_start, 1), "matched": bool(matched)}
        if matched:
            first = matched[0]
            row.update(diagnosis=first.fault, blamed=list(first.nodes), action=first.action,
                       confidence=round(first.confidence, 2),
                       detection_latency_s=round(max(0.0, first.ts - float(lab["onset"])), 1))
            ids = {d.id for d in matched}
            cmds = [c for c in obeyed if c.command.diagnosis_id in ids]
            if cmds:
                # Simulated seconds from the fault's onset: remediation runs on event time, so a
                # command's issued_at is on the same clock as the onset.
                c = cmds[0]
                onset = float(lab["onset"])
                row.update(command=c.command.action, command_nodes=list(c.command.nodes),
                           commands=[x.command.action for x in cmds],
                           time_to_command_s=round(max(0.0, c.command.issued_at - onset), 1),
                           time_to_obeyed_s=round(c.sim_ts - onset, 1) if c.sim_ts is not None else None)
        elif (cut := _cut_short(obeyed, lab)) is not None:
            # A missed fault is often one another fault's remediation cured first (a restart ends
            # a hang before any detector may call it one): say so rather than leave it unexplained.
            row["cut_short_by"] = cut
        rows.append(row)
    return rows


def _cut_short(obeyed: list, lab: Mapping[str, Any]) -> dict[str, Any] | None:
    onset, end = float(lab["onset"]), float(lab["onset"]) + EPISODE_S.get(lab["fault"], 60.0)
    for c in obeyed:
        if c.sim_ts is not None and onset <= c.sim_ts <= end and c.command.action in RESTARTING:
            return {"action": c.command.action, "nodes": list(c.command.nodes), "reason": c.command.reason,
                    "after_s": round(c.sim_ts - onset, 1)}
    return None


def build(state: DemoState, labels: list[Mapping[str, Any]], *, trainer_events: list[dict[str, Any]],
          ettr: list[dict[str, Any]], files: dict[str, Any], pipeline: dict[str, dict], interrupted: bool,
          notes: list[str]) -> dict[str, Any]:
    sim_diags = [d for d in state.diagnoses if d.job == state.sim_job]
    s = score(sim_diags, labels)
    accepted = Counter(c.command.action for c in state.commands if c.accepted and c.command)
    refused = [{"id": c.command.id if c.command else None, "action": c.command.action if c.command else None,
                "reason": c.reason} for c in state.commands if not c.accepted]
    restarts = [e for e in trainer_events if e.get("event") == "restart"]
    return {
        "run": {"job": state.sim_job, "nodes": len(state.slots), "simulated_s": round(state.sim_now - state.sim_start, 1),
                "wall_s": round(_wall(state), 1), "events_published": state.published, "interrupted": interrupted,
                "lockstep_timeouts": state.lockstep_timeouts,
                "notes": notes},
        "injected": injected(state, labels),
        "score": s.overall(),
        "wrongly_blamed": {
            "healthy_nodes_blamed": s.healthy_nodes_blamed, "over_evicted_nodes": s.over_evicted_nodes,
            "false_diagnoses": [{"fault": d.fault, "nodes": list(d.nodes), "action": d.action,
                                 "at_s": round(d.ts - state.sim_start, 1)} for d in s.unmatched],
        },
        "commands": {"obeyed": dict(accepted), "refused": refused, "launcher_restarts": state.launcher_restarts},
        "trainer": {"job": state.trainer_job, "restarts": [{k: e.get(k) for k in ("action", "resume", "nodes_out", "command_id")}
                                                          for e in restarts],
                    "done": any(e.get("event") == "done" for e in trainer_events)} if state.trainer_job else None,
        "ettr": ettr,
        "pipeline": pipeline,
        "files": files,
    }


def _wall(state: DemoState) -> float:
    import time

    return time.time() - state.started_wall


def json_lines(report: dict[str, Any]) -> list[bytes]:
    return [orjson.dumps({"section": name, "data": body}, default=str) for name, body in report.items()]


def render(report: dict[str, Any], file: IO[str] | None = None) -> None:
    console = Console(file=file, highlight=False)
    run = report["run"]
    console.rule(f"faultlens demo: {run['job']} on {run['nodes']} nodes, {run['simulated_s']:.0f} simulated s "
                 f"in {run['wall_s']:.0f} s{' (interrupted)' if run['interrupted'] else ''}")
    for note in run["notes"]:
        console.print(f"[yellow]note:[/] {note}")
    t = Table(title="Injected faults → diagnoses → commands (simulated seconds from onset)", show_lines=False)
    for col in ("at (s)", "fault", "nodes", "found", "blamed", "latency (s)", "command", "to command (s)", "obeyed (s)"):
        t.add_column(col)
    for r in report["injected"]:
        t.add_row(f"{r['onset_s']:.0f}", r["fault"], ",".join(r["nodes"]),
                  "[green]yes[/]" if r["matched"] else _missed(r), ",".join(r.get("blamed", [])),
                  _num(r.get("detection_latency_s")), "→".join(r.get("commands", [])) or "-", _num(r.get("time_to_command_s")),
                  _num(r.get("time_to_obeyed_s")))
    console.print(t)
    sc, wb = report["score"], report["wrongly_blamed"]
    console.print(f"precision {sc['precision']}  recall {sc['recall']}  detection latency p50 "
                  f"{sc['detection_latency_p50_s']} s  p99 {sc['detection_latency_p99_s']} s")
    console.print(f"wrongly blamed: {wb['healthy_nodes_blamed']} healthy node(s), {len(wb['false_diagnoses'])} false "
                  f"diagnosis(es); over-evicted by design (parallel groups): {wb['over_evicted_nodes']}")
    for d in wb["false_diagnoses"][:10]:
        console.print(f"  at {d['at_s']:.0f} s: {d['fault']} on {','.join(d['nodes']) or '-'} → {d['action']}")
    cm = report["commands"]
    console.print(f"commands obeyed: {cm['obeyed'] or 'none'}; refused: {len(cm['refused'])} "
                  f"({'; '.join(sorted({r['reason'] for r in cm['refused']})) or '-'})")
    if report["trainer"]:
        tr = report["trainer"]
        steps = ", ".join(f"{r['action']} (resume {r['resume']})" for r in tr["restarts"]) or "none"
        console.print(f"real trainer {tr['job']}: restarts {steps}; finished: {tr['done']}")
    for row in report["ettr"]:
        console.print(f"ETTR {row['job']}: {_num(row.get('ettr'))} ({_num(row.get('productive_s'))} s productive of "
                      f"{_num(row.get('wall_s'))} s, {row.get('incidents')} incident(s))")
    for name, path in report["files"].items():
        console.print(f"{name}: {path}")


def _missed(row: dict[str, Any]) -> str:
    cut = row.get("cut_short_by")
    if not cut:
        return "[red]missed[/]"
    return f"[red]missed[/] (job restarted by {cut['action']} {','.join(cut['nodes'])} {cut['after_s']:.0f} s in)"


def _num(x: Any) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" if isinstance(x, float) else str(x)


def files_of(out_dir: Path, db: Path, plots: dict[str, Path | None]) -> dict[str, Any]:
    return {"out_dir": str(out_dir), "history_db": str(db),
            "plots": sorted(str(p) for p in plots.values() if p is not None)}
