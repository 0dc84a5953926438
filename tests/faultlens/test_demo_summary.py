"""The demo's end report as a person reads it: whole at 80 columns, in a log file (no TTY).

The report below is the shape `faultlens demo --json` prints (its sections and keys), with values
from a 64-node seed-0 run: every fault class, a hang cut short by another fault's eviction, a
fail-slow whose verdict came after stack rounds, a group eviction, a forged command refused.
"""

from __future__ import annotations

import io
import re

from faultlens.demo import summary
from faultlens.events.diagnosis_record import FAULT_CLASSES


def _fault(at, fault, nodes, *, latency=1.0, commands=("evict",), blamed=None, to_cmd=2.0, obeyed=3.0,
           action="evict", diagnosis=None):
    row = {"fault": fault, "nodes": list(nodes), "onset_s": float(at), "matched": True,
           "diagnosis": diagnosis or fault, "blamed": list(nodes if blamed is None else blamed), "action": action,
           "confidence": 1.0, "detection_latency_s": latency}
    if commands:
        row.update(command=commands[0], command_nodes=list(nodes), commands=list(commands),
                   time_to_command_s=to_cmd, time_to_obeyed_s=obeyed)
    return row


HANG_CUT_SHORT = {
    "fault": "job_hang", "nodes": ["n043"], "onset_s": 512.0, "matched": False,
    "cut_short_by": {"action": "evict", "nodes": ["n017"], "after_s": 36.0,
                     "reason": "gpu_reset_required: evict and restart on warm standbys (Xid 119 GSP_RPC_TIMEOUT "
                               "on GPU 0000:9a:00, <pid 20580>)"},
}

REPORT = {
    "run": {"job": "demo-sim", "nodes": 64, "simulated_s": 1449.0, "wall_s": 96.4, "events_published": 120345,
            "interrupted": False, "lockstep_timeouts": 0,
            "notes": ["torch is not installed: the real trainer job is skipped (pip install '.[torch]')"]},
    "injected": [
        _fault(60, "gpu_reset_required", ["n017"], action="evict_reset_gpu"),
        _fault(140, "nccl_error", ["n020", "n021", "n022"], blamed=["n020"], commands=("reattempt",), action="reattempt"),
        {**_fault(230, "fail_slow", ["n033"], latency=71.35, commands=("capture_stacks", "capture_stacks", "evict"),
                  blamed=["n032", "n033", "n034", "n035"], to_cmd=61.0, obeyed=82.0),
         "over_evicted": {"nodes": ["n032", "n034", "n035"], "group": "pp:9",
                          "why": "the slow ranks' stacks name group pp:9"}},
        _fault(330, "loss_spike", ["n001"], blamed=[], commands=("rollback",), action="stop_time_diagnosis"),
        HANG_CUT_SHORT,
        *[_fault(600 + 40 * i, f, [f"n{10 + i:03d}"]) for i, f in enumerate(
            c for c in FAULT_CLASSES if c not in ("gpu_reset_required", "nccl_error", "fail_slow", "loss_spike",
                                                 "job_hang", "unknown"))],
    ],
    "score": {"precision": 0.95, "recall": 0.9412, "detection_latency_p50_s": 0.0, "detection_latency_p99_s": 69.5,
              "healthy_nodes_blamed": 1},
    "wrongly_blamed": {"healthy_nodes_blamed": 1, "over_evicted_nodes": 3,
                       "false_diagnoses": [{"fault": "gpu_thermal", "nodes": ["n050"], "action": "evict",
                                            "at_s": 901.0}]},
    "commands": {"obeyed": {"evict": 9, "rollback": 3, "reattempt": 3, "restart": 1, "capture_stacks": 3},
                 "refused": [{"id": "b848b085", "action": "evict", "reason": "bad signature (forged or altered)"}],
                 "launcher_restarts": 0},
    "trainer": None,
    "ettr": [{"job": "demo-sim", "wall_s": 1449.0, "productive_s": 1130.6, "ettr": 0.7803, "incidents": 24}],
    "projection": {"gpus": 9600, "days": 90.0, "ettr": 0.9791, "ettr_monte_carlo": 0.9789,
                   "ettr_ci": [0.9786, 0.9792], "timeout_only_ettr": 0.8631, "checkpoint_interval_optimal_s": 33.9,
                   "largest_losses": [{"cause": "cuda error localisation", "share": 0.0081,
                                       "source": "preset", "kind": "assumed"},
                                      {"cause": "job hang detection", "share": 0.0031,
                                       "source": "measured", "samples": 2, "guess": True},
                                      {"cause": "cuda error recovery", "share": 0.0013, "source": "preset"}],
                   "measured_classes": ["cuda_error", "job_hang"]},
    "pipeline": {},
    "files": {"out_dir": "/home/someone/.faultlens/demo-20261122-204831",
              "history_db": "/home/someone/.faultlens/demo-20261122-204831/history.duckdb",
              "history_bytes": 178_270_208,
              "plots": [f"/home/someone/.faultlens/demo-20261122-204831/plots/{n}.png" for n in ("mtbf", "mttr")],
              "html_report": "/home/someone/.faultlens/demo-20261122-204831/report.html"},
}


def _rendered() -> str:
    out = io.StringIO()  # not a terminal: what a log file or a pipe gets
    summary.render(REPORT, file=out)
    return out.getvalue()


def test_fits_80_columns_without_cutting_anything():
    text = _rendered()
    lines = text.splitlines()
    too_wide = [line for line in lines if len(line) > 80 and not line.strip().startswith("file://")]
    assert not too_wide, too_wide
    assert "…" not in text
    assert "\x1b[" not in text  # no colour codes in a log file


def test_every_class_is_named_in_full():
    text = _rendered()
    for r in REPORT["injected"]:
        assert re.search(rf"^\s+\d+ {r['fault']}\s", text, re.M), r["fault"]


def test_a_missed_fault_says_why_on_lines_of_its_own():
    lines = _rendered().splitlines()
    row = next(i for i, line in enumerate(lines) if " job_hang " in line)
    assert "MISSED" in lines[row]
    follow = "\n".join(lines[row + 1:row + 5])
    assert "missed: the job was restarted by evict n017 36 s after the onset" in follow
    # the long reason is wrapped, whole, with its '<' kept
    reason = " ".join(line.strip() for line in lines[row + 1:row + 6])
    assert HANG_CUT_SHORT["cut_short_by"]["reason"] in reason


def test_follow_up_lines_for_groups_chains_and_several_nodes():
    text = _rendered()
    assert "blamed n032, n033, n034, n035; diagnosed as fail_slow → evict" in text
    assert "commands: capture_stacks → capture_stacks → evict" in text
    assert "injected on n020, n021, n022" in text
    assert re.search(r"^ +140 nccl_error +n020 \+2 +yes", text, re.M)
    assert "blamed no node (job-wide); diagnosed as loss_spike → stop_time_diagnosis" in text


def test_ends_with_where_to_find_the_html_report():
    lines = _rendered().rstrip().splitlines()
    assert lines[-1].strip() == "file:///home/someone/.faultlens/demo-20261122-204831/report.html"
    at = lines.index("  history: /home/someone/.faultlens/demo-20261122-204831/history.duckdb")
    assert lines[at + 1] == "    170 MiB"
    assert "refused: 1" in "\n".join(lines) and "bad signature (forged or altered)" in "\n".join(lines)


def test_a_fault_found_but_not_acted_on_says_why():
    from faultlens.demo.state import DemoState
    from faultlens.events.diagnosis_record import Diagnosis
    from faultlens.remediation.decision import Decision

    t0 = 1_795_380_000.0
    state = DemoState(sim_job="demo-sim", sim_start=t0, sim_now=t0 + 1455)
    kernel = Diagnosis(job="demo-sim", ts=t0 + 430.5, onset=t0 + 430.2, fault="kernel", action="restart",
                       nodes=("n019",), detail="soft_lockup: watchdog: BUG: soft lockup - CPU#113 stuck for 22s!")
    state.on_diagnosis(kernel)
    state.on_decision(Decision(ts=kernel.ts, job="demo-sim", diagnosis_id=kernel.id, fault="kernel",
                               rung="same_incident", action="none", nodes=("n019",),
                               reason="kernel: within 30s of the last escalation; same incident", mode="act",
                               sent=False))
    label = {"job": "demo-sim", "fault": "kernel", "nodes": ["n019"], "ranks": [], "onset": t0 + 430.0}
    (row,) = summary.injected(state, [label])
    assert row["matched"] and "command" not in row
    assert row["no_command_because"] == "kernel: within 30s of the last escalation; same incident"
    report = {**REPORT, "injected": [row]}
    out = io.StringIO()
    summary.render(report, file=out)
    lines = out.getvalue().splitlines()
    at = next(i for i, line in enumerate(lines) if re.match(r"^ +430 kernel ", line))
    assert lines[at + 1].strip() == "no command: kernel: within 30s of the last escalation; same incident"


def test_the_projection_of_a_big_job_is_printed():
    text = " ".join(_rendered().split())
    assert "Projected ETTR of a 9,600-GPU, 90-day job" in text
    assert "97.9%" in text and "timeout alone: 86.3%" in text and "cuda error localisation 0.81%" in text


def test_the_projection_carries_the_runs_own_detection():
    from faultlens.diagnosis.replay.scoring import score
    from faultlens.history.whatif import presets
    from faultlens.history.whatif.closed_form import project

    labels = [{"job": "demo-sim", "fault": "job_hang", "nodes": ["n001"], "ranks": [], "onset": 100.0}]
    missed = summary._projection(score([], labels))   # nothing found: the NCCL timeout decides
    assert missed["measured_classes"] == ["job_hang"]
    assert missed["ettr"] < project(presets.byterobust()).ettr
    lo, hi = missed["ettr_ci"]
    assert lo <= missed["ettr_monte_carlo"] <= hi
    assert summary._projection(score([], [])) is None


def test_an_over_eviction_says_which_fault_and_why():
    text = _rendered()
    assert re.search(r"over-evicted \(.*\): 3$", text, re.M)
    said = " ".join(line.strip() for line in text.splitlines())
    assert "fail_slow at 230 s: 3 beside n033: the slow ranks' stacks name group pp:9" in said


def _hang_verdict(detail: str, group: str = "pp:9"):
    from faultlens.events.diagnosis_record import Diagnosis

    return Diagnosis(job="demo-sim", ts=100.0, onset=10.0, fault="job_hang", action="evict",
                     nodes=("n032", "n033", "n034", "n035"), group=group, detail=detail)


def test_the_reason_of_a_group_eviction_comes_from_the_verdicts_evidence():
    # The detail texts are diagnosis.hang.recorder's (rule names and the recorder's "names nobody").
    stuck = _hang_verdict("stalled 60s; rule outlier-clustering: 8 outlier rank(s) [56-63]; flight recorder names "
                          "nobody: 1 group(s) have every member inside the collective they wait in (joined but "
                          "stuck), e.g. pg 8 _allgather_base #33 with ranks 56-63; recorder: ranks 0 of pg 25 wait")
    why = summary.group_reason(stuck)
    assert why.startswith("the Flight Recorder names nobody (1 group(s) have every member inside")
    assert "joined but stuck" in why and "recorder: ranks 0" not in why and "pp:9" in why
    assert "no Flight Recorder dump" in summary.group_reason(_hang_verdict("stalled 60s; rule outlier-clustering: ..."))
    spread = summary.group_reason(_hang_verdict("stalled 60s; rule flight-recorder: 3 suspect rank(s) [1, 9, 17]"))
    assert spread == "the Flight Recorder's suspects span group pp:9"


def test_injected_rows_mark_the_machines_evicted_beside_the_culprit():
    from faultlens.demo.state import DemoState

    t0 = 1_795_380_000.0
    state = DemoState(sim_job="demo-sim", sim_start=t0, sim_now=t0 + 400)
    hang = _hang_verdict("stalled 60s; rule outlier-clustering: 24 outlier rank(s)")
    state.on_diagnosis(type(hang)(**{**{f: getattr(hang, f) for f in ("job", "fault", "action", "nodes", "group",
                                                                       "detail")}, "ts": t0 + 100, "onset": t0 + 20}))
    label = {"job": "demo-sim", "fault": "job_hang", "nodes": ["n033"], "ranks": [], "onset": t0 + 20}
    [row] = summary.injected(state, [label])
    assert row["over_evicted"]["nodes"] == ["n032", "n034", "n035"]
    assert row["over_evicted"]["why"] == "no Flight Recorder dump: the stacks alone name group pp:9"
    exact = {**label, "nodes": ["n032", "n033", "n034", "n035"]}
    assert "over_evicted" not in summary.injected(state, [exact])[0]


def test_each_projected_loss_says_whether_this_run_measured_it_or_the_preset_gave_it():
    lines = _rendered().splitlines()
    row = next(i for i, line in enumerate(lines) if "largest losses" in line)
    assert "preset's fault rate" in lines[row]
    losses = [line.strip() for line in lines[row + 1:row + 4]]
    assert re.fullmatch(r"cuda error localisation +0\.81% +the preset \(assumed: a guess\)", losses[0])
    assert re.fullmatch(r"job hang detection +0\.31% +this run, 2 samples: treat it as a guess", losses[1])
    assert re.fullmatch(r"cuda error recovery +0\.13% +the preset", losses[2])


def test_the_projection_marks_its_losses_by_where_their_seconds_come_from():
    from faultlens.history.whatif.headline import headline

    def row(fault, n, p50):
        return {"fault": fault, "labels": n, "detected": n, "recall": 1.0, "detection_latency_p50_s": p50,
                "wrong_nodes": 0}

    losses = {x["cause"]: x for x in headline({"nic": row("nic", 6, 900.0), "unknown": row("unknown", 1, 5.0)},
                                              runs=2, top=40)["largest_losses"]}
    assert {k: losses["nic detection"][k] for k in ("source", "samples", "guess")} == \
        {"source": "measured", "samples": 6, "guess": False}
    assert losses["unknown detection"]["guess"] is True and losses["unknown detection"]["samples"] == 1
    # unknown is found at stop time: its localisation stays the preset's guess, however well it was detected
    assert losses["unknown localisation"] == {**losses["unknown localisation"], "source": "preset", "kind": "assumed"}
    assert losses["job hang detection"]["source"] == "preset"   # not in this run's score
    assert losses["cuda error recovery"]["source"] == "preset"
