"""The demo's end report: what was injected, what was found and done about it, what was wrongly
blamed, the jobs' ETTR from the fault history, and where the history and plots were written."""

from __future__ import annotations

import logging
import textwrap
from collections import Counter
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Mapping, Sequence

import orjson
from rich.console import Console
from rich.text import Text

from faultlens.demo.state import DemoState
from faultlens.diagnosis.replay.scoring import LATENCY_WORDS_LABELLED, score
from faultlens.events.command import Command
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.history.whatif.headline import loss_source_words
from faultlens.simulator import EPISODE_S

log = logging.getLogger(__name__)

RESTARTING = ("evict", "restart", "reattempt", "rollback")


def _matches(d: Diagnosis, label: Mapping[str, Any]) -> bool:
    # score() on one pair applies the project's matching rule (class, job, time window, nodes).
    return not score([d], [label]).missed


def injected(state: DemoState, labels: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per injected fault: its first matching diagnosis, the command it led to, timings."""
    diags = sorted((d for d in state.diagnoses if d.job == state.sim_job), key=lambda d: d.ts)
    # (the command, when the cluster obeyed it) of each accepted command
    obeyed = [(c.command, c.sim_ts) for c in state.commands if c.accepted and c.command is not None]
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
            acted = next((d for d in matched if d.action == "evict"), None)
            extra = sorted(set(acted.nodes) - set(lab.get("nodes") or ())) if acted is not None else []
            if acted is not None and extra and lab["fault"] in GROUP_FAULTS:
                # A group eviction: the machines beyond the culprit's, and what kept the verdict from one.
                row["over_evicted"] = {"nodes": extra, "group": acted.group, "why": group_reason(acted)}
            ids = {d.id for d in matched}
            cmds = [(command, sim_ts) for command, sim_ts in obeyed if command.diagnosis_id in ids]
            if cmds:
                # Simulated seconds from the fault's onset: remediation runs on event time, so a
                # command's issued_at is on the same clock as the onset.
                command, sim_ts = cmds[0]
                onset = float(lab["onset"])
                row.update(command=command.action, command_nodes=list(command.nodes),
                           commands=[x.action for x, _ in cmds],
                           time_to_command_s=round(max(0.0, command.issued_at - onset), 1),
                           time_to_obeyed_s=round(sim_ts - onset, 1) if sim_ts is not None else None)
            elif (why := _no_command(state, ids)) is not None:
                # Found but not acted on: the remediation's own reason (same incident, a cap, a breaker).
                row["no_command_because"] = why
        elif (cut := _cut_short(obeyed, lab)) is not None:
            # A missed fault is often one another fault's remediation cured first (a restart ends
            # a hang before any detector may call it one): say so rather than leave it unexplained.
            row["cut_short_by"] = cut
        rows.append(row)
    return rows


# Faults localised by their evidence (stacks, the Flight Recorder) rather than named by a log line:
# where the evidence cannot single out a machine, their parallel group is evicted (ByteRobust's rule).
GROUP_FAULTS = ("job_hang", "fail_slow")
_RECORDER_SILENT = "flight recorder names nobody: "


def group_reason(d: Diagnosis) -> str:
    """Why a hang or fail-slow verdict named a group, not one machine, from its detail."""
    detail = d.detail or ""
    where = f"group {d.group}" if d.group else "the group"
    if _RECORDER_SILENT in detail:
        why = detail.split(_RECORDER_SILENT, 1)[1].split("; recorder:", 1)[0].split("; rank ", 1)[0]
        return f"the Flight Recorder names nobody ({why}), so the stacks' {where} is all the evidence says"
    if "rule flight-recorder" in detail:
        return f"the Flight Recorder's suspects span {where}"
    if d.fault == "job_hang":
        return f"no Flight Recorder dump: the stacks alone name {where}"
    return f"the slow ranks' stacks name {where}"


def _no_command(state: DemoState, ids: set[str]) -> str | None:
    with state.lock:
        decisions = [d for d in state.decisions if getattr(d, "diagnosis_id", None) in ids]
    for d in decisions:
        if not d.sent:
            return f"{d.reason}{f' (blocked: {d.blocked})' if d.blocked else ''}"
    return None


def _cut_short(obeyed: list[tuple[Command, float | None]], lab: Mapping[str, Any]) -> dict[str, Any] | None:
    onset, end = float(lab["onset"]), float(lab["onset"]) + EPISODE_S.get(lab["fault"], 60.0)
    for command, sim_ts in obeyed:
        if sim_ts is not None and onset <= sim_ts <= end and command.action in RESTARTING:
            return {"action": command.action, "nodes": list(command.nodes), "reason": command.reason,
                    "after_s": round(sim_ts - onset, 1)}
    return None


def build(state: DemoState, labels: Sequence[Mapping[str, Any]], *, trainer_events: list[dict[str, Any]],
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
        "projection": _projection(s),
        "pipeline": pipeline,
        "files": files,
    }


def _projection(s) -> dict[str, Any] | None:
    """This run's measured detection carried to a 9,600-GPU, 90-day job (docs/ettr.md)."""
    from faultlens.history.whatif.headline import headline

    rows = {k: c.to_dict() for k, c in s.classes.items() if c.labels}
    try:
        return headline(rows) if rows else None
    except ValueError as exc:    # a measurement the model refuses must not cost the demo its report
        log.warning("no ETTR projection: %s", exc)
        return None


def _wall(state: DemoState) -> float:
    import time

    return time.time() - state.started_wall


def json_lines(report: dict[str, Any]) -> list[bytes]:
    # Tallies are keyed by FaultClass / Action (StrEnum since issue 48): orjson takes only exact-str keys
    # without OPT_NON_STR_KEYS, and a member's key is written as its name.
    return [orjson.dumps({"section": name, "data": body}, default=str, option=orjson.OPT_NON_STR_KEYS)
            for name, body in report.items()]


# Column widths of the injected-faults table: 79 characters in all, so it reads whole in an
# 80-column terminal and in a log file; the longest class name (gpu_reset_required) is 18.
_COLUMNS = (("at s", 5, ">"), ("fault", 18, "<"), ("nodes", 9, "<"), ("found", 6, "<"), ("latency", 7, ">"),
            ("command", 14, "<"), ("to cmd", 6, ">"), ("obeyed", 6, ">"))


_FOUND_AT = 1 + sum(width + 1 for _, width, _ in _COLUMNS[:3])  # where the "found" cell starts in a row


def _row(values: list[str]) -> str:
    cells = [f"{v:{align}{width}}" for v, (_, width, align) in zip(values, _COLUMNS, strict=True)]
    return (" " + " ".join(cells)).rstrip()


def _short_nodes(nodes: list[str]) -> str:
    if len(nodes) <= 1 or len(",".join(nodes)) <= 9:
        return ",".join(nodes) or "-"
    return f"{nodes[0]} +{len(nodes) - 1}"


def _follow_ups(r: dict[str, Any]) -> list[str]:
    """What does not fit a cell, each on its own line under the fault's row."""
    lines = []
    nodes = list(r["nodes"])
    if len(_short_nodes(nodes)) < len(",".join(nodes)):
        lines.append(f"injected on {', '.join(nodes)}")
    blamed = r.get("blamed")
    if r["matched"] and blamed is not None and sorted(blamed) != sorted(nodes):
        lines.append(f"blamed {', '.join(blamed) or 'no node (job-wide)'}; diagnosed as {r['diagnosis']} "
                     f"→ {r['action']}")
    commands = r.get("commands") or []
    if r.get("no_command_because"):
        lines.append(f"no command: {r['no_command_because']}")
    if len(commands) > 1:
        lines.append("commands: " + " → ".join(commands))
    if not r["matched"]:
        cut = r.get("cut_short_by")
        if cut:
            lines.append(f"missed: the job was restarted by {cut['action']} {','.join(cut['nodes']) or '(all)'} "
                         f"{cut['after_s']:.0f} s after the onset, before a detector could call it")
            lines.append(f"that command's reason: {cut['reason']}")
        else:
            lines.append("missed: no diagnosis of this class named these nodes in time")
    return lines


def render(report: dict[str, Any], file: IO[str] | None = None) -> None:
    """The end report for a person: reads whole at 80 columns, in a terminal or in a log file."""
    console = Console(file=file, highlight=False)
    width = min(console.width, 100) if console.is_terminal else 80

    def say(text: str = "", style: str | None = None, indent: int = 0, hang: int = 2) -> None:
        # Wrapped here, not by rich: rich folds a long word (a path, a URL) mid-way at 80 columns.
        lines = textwrap.wrap(text, width=width, initial_indent=" " * indent,
                              subsequent_indent=" " * (indent + hang), break_long_words=False,
                              break_on_hyphens=False) or [""]
        for line in lines:
            console.print(Text(line, style=style) if style else Text(line), soft_wrap=True)

    run = report["run"]
    console.rule(f"faultlens demo: {run['job']} on {run['nodes']} nodes, {run['simulated_s']:.0f} simulated s "
                 f"in {run['wall_s']:.0f} s{' (interrupted)' if run['interrupted'] else ''}")
    for note in run["notes"]:
        say(f"note: {note}", "yellow")
    say()
    say("Injected faults → diagnoses → commands", "bold")
    say("seconds of simulated time: 'at' from the start; latency, to cmd and obeyed from the fault's onset")
    console.print(Text(_row([c for c, _, _ in _COLUMNS]), style="bold"), soft_wrap=True)
    for r in report["injected"]:
        found = "yes" if r["matched"] else "MISSED"
        line = _row([f"{r['onset_s']:.0f}", r["fault"], _short_nodes(list(r["nodes"])), found,
                     _num(r.get("detection_latency_s")), (r.get("commands") or ["-"])[0],
                     _num(r.get("time_to_command_s")), _num(r.get("time_to_obeyed_s"))])
        text = Text(line)
        start = _FOUND_AT
        text.stylize("green" if r["matched"] else "bold red", start, start + len(found))
        console.print(text, soft_wrap=True)
        for extra in _follow_ups(r):
            say(extra, "red" if extra.startswith("missed") else "dim", indent=7)
    sc, wb = report["score"], report["wrongly_blamed"]
    say()
    say(f"precision {_num(sc['precision'])}, recall {_num(sc['recall'])}; detection latency p50 "
        f"{_num(sc['detection_latency_p50_s'])} s, p99 {_num(sc['detection_latency_p99_s'])} s "
        f"({LATENCY_WORDS_LABELLED})")
    say()
    say("Wrongly blamed", "bold")
    say(f"healthy nodes blamed: {wb['healthy_nodes_blamed']}", indent=2)
    say(f"false diagnoses: {len(wb['false_diagnoses'])}", indent=2)
    for d in wb["false_diagnoses"][:10]:
        say(f"at {d['at_s']:.0f} s: {d['fault']} on {', '.join(d['nodes']) or '-'} → {d['action']}", indent=4)
    # Each group eviction says on its own line why the evidence could not name one machine.
    say(f"over-evicted (healthy machines of a hang's or fail-slow's group): {wb['over_evicted_nodes']}", indent=2)
    for r in report["injected"]:
        if r.get("over_evicted"):
            say(f"{r['fault']} at {r['onset_s']:.0f} s: {len(r['over_evicted']['nodes'])} beside "
                f"{', '.join(r['nodes'])}: {r['over_evicted']['why']}", indent=4)
    _say_outcomes(report, say)

def _say_outcomes(report: dict[str, Any], say: Callable[..., None]) -> None:
    """The end report's second half: what was commanded, the real trainer, the ETTR, the files."""
    cm = report["commands"]
    say()
    say("Commands", "bold")
    obeyed = ", ".join(f"{n} {a}" for a, n in sorted(cm["obeyed"].items(), key=lambda kv: (-kv[1], kv[0])))
    say(f"obeyed: {obeyed or 'none'}", indent=2)
    say(f"refused: {len(cm['refused'])}", indent=2)
    for reason in sorted({str(r["reason"]) for r in cm["refused"]}):
        say(reason, indent=4)
    if cm.get("launcher_restarts"):
        say(f"restarted by the launcher with no command: {cm['launcher_restarts']}", indent=2)
    if report["trainer"]:
        tr = report["trainer"]
        steps = ", ".join(f"{r['action']} (resume {r['resume']})" for r in tr["restarts"]) or "none"
        say()
        say(f"Real trainer {tr['job']}: restarts {steps}; finished: {'yes' if tr['done'] else 'no'}")
    if report["ettr"]:
        say()
        say("Effective training time ratio (from the history)", "bold")
    for row in report["ettr"]:
        say(f"{row['job']}: ETTR {_num(row.get('ettr'))} ({_num(row.get('productive_s'))} s productive of "
            f"{_num(row.get('wall_s'))} s, {row.get('incidents')} incident(s))", indent=2)
    pr = report.get("projection")
    if pr:
        say()
        say(f"Projected ETTR of a {pr['gpus']:,}-GPU, {pr['days']:g}-day job with this run's detection", "bold")
        lo, hi = pr["ettr_ci"]
        say(f"{pr['ettr']:.1%} (Monte Carlo {pr['ettr_monte_carlo']:.1%}, CI {lo:.2%}-{hi:.2%}); "
            f"timeout alone: {pr['timeout_only_ettr']:.1%}", indent=2)
        losses = pr["largest_losses"]
        say("largest losses, each the preset's fault rate times seconds from:", indent=2)
        width = max((len(x["cause"]) for x in losses), default=0)
        for x in losses:
            say(f"{x['cause']:<{width}} {x['share']:>6.2%}  {loss_source_words(x)}", indent=4)
        say("faultlens ettr --from-score, docs/ettr.md", "dim", indent=2)
    files = report["files"]
    say()
    say(f"Written to {files['out_dir']}", "bold")
    size = files.get("history_bytes")
    say(f"history: {files['history_db']}", indent=2)
    if size:  # a path's own line, whole, so it can be copied; its size under it
        say(f"{size / 2**20:,.0f} MiB", "dim", indent=4)
    if files.get("plots"):
        say(f"plots: {len(files['plots'])} PNG charts in {Path(files['plots'][0]).parent}", indent=2)
    if files.get("html_report"):
        say("Open the incident report (one self-contained HTML file) in a browser:", "bold")
        say(Path(files["html_report"]).resolve().as_uri(), indent=2)



def _num(x: Any) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" if isinstance(x, float) else str(x)


def files_of(out_dir: Path, db: Path, plots: dict[str, Path | None], html: Path | None = None) -> dict[str, Any]:
    return {"out_dir": str(out_dir), "history_db": str(db),
            "history_bytes": db.stat().st_size if db.exists() else None,
            "plots": sorted(str(p) for p in plots.values() if p is not None),
            "html_report": str(html) if html is not None else None}
