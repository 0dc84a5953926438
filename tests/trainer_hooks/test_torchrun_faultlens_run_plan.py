"""`faultlens run`'s pure rules (trainer_hooks.elastic_commands) and its command line, no broker."""

from __future__ import annotations

import threading
import time

import pytest

from faultlens.cli import build_parser, main
from faultlens.events.command import Command
from faultlens.extras import missing_extra_line
from faultlens.trainer_hooks.elastic_commands import (
    CommandInbox,
    RoundNote,
    action_of_exit_codes,
    merge_round,
    named_checkpoint,
    own_exit_codes,
    rendezvous_topology,
    resume_choice,
    resume_of,
)
from faultlens.trainer_hooks.exit_codes import ACTION_EXIT


def cmd(action: str, nodes: tuple[str, ...] = (), **params) -> Command:
    now = time.time()
    return Command(job="j", action=action, nodes=nodes, issued_at=now, expires_at=now + 60, reason=f"why {action}",
                   params=params)


def test_the_rendezvous_places_ranks_node_after_node_in_group_rank_order():
    notes = [RoundNote(node="b", attempt=0, local_world=2), RoundNote(node="a", attempt=0, local_world=3)]
    topo = rendezvous_topology(notes)
    assert topo is not None and (topo.tp, topo.pp, topo.dp) == (1, 1, 5) and topo.extra is None  # sizes differ
    assert topo.ranks_by_node == {"b": (0, 1), "a": (2, 3, 4)} and topo.nodes == ("b", "a")
    # A hung rank's own PP group is itself: localised to its machine, never the whole job.
    assert topo.group_ranks("pp", topo.group_id(3, "pp")) == (3,)
    even = rendezvous_topology([RoundNote(node="a", attempt=0, local_world=2)])
    assert even is not None and even.extra == {"gpus_per_node": 2}
    # An agent that does not say (an older one) leaves the job without a launcher's topology.
    assert rendezvous_topology([RoundNote(node="a", attempt=0)]) is None
    assert RoundNote.decode(notes[1].encode()) == notes[1]


def ladder_rollback(fault: str, action: str) -> Command:
    """The command the remediator's ladder sends for a diagnosis (its reason as the ladder writes it)."""
    from faultlens.events.diagnosis_record import Diagnosis
    from faultlens.remediation.ladder import JobLadder

    now = time.time()
    step = JobLadder("j").decide(Diagnosis(job="j", ts=now, onset=now, fault=fault, action=action))
    assert step.action == "rollback", step
    return Command(job="j", action="rollback", issued_at=now, expires_at=now + 60, reason=step.reason,
                   params=dict(step.params))


def test_a_rollback_resumes_from_the_newest_good_checkpoint_unless_the_fault_poisons_state():
    # user code crashed: the newest checkpoint is good, going further back only redoes steps
    resume, why = resume_choice("rollback", ladder_rollback("user_code", "rollback"))
    assert resume == "latest" and "user_code does not poison" in why
    for fault in ("nan_loss", "loss_spike", "loss_stalled"):  # the newest may hold the poisoned state
        resume, why = resume_choice("rollback", ladder_rollback(fault, "rollback"))
        assert resume == "rollback" and f"{fault} may have poisoned" in why
    # the remediator may name the fault itself; a person's rollback names none: one back, as asked
    assert resume_choice("rollback", cmd("rollback", fault="cuda_error"))[0] == "latest"
    assert resume_choice("rollback", cmd("rollback"))[0] == "rollback"
    assert resume_choice("rollback", None)[0] == "rollback"  # a worker's exit code 77 without its command
    assert resume_choice("reattempt", None)[0] == "latest"
    # every node of the round hears why
    plan = merge_round([RoundNote(node="a", attempt=1, action="rollback", resume="latest", resume_why="newest: ok"),
                        RoundNote(node="b", attempt=1)])
    assert plan.resume == "latest" and plan.resume_why == "newest: ok"


def test_every_node_of_a_round_resumes_from_the_same_point():
    plain = RoundNote(node="n000", attempt=1)
    rolled = RoundNote(node="n001", attempt=1, action="rollback", command_id="c1", reason="loss spike",
                       resume="rollback")
    plan = merge_round([plain, rolled])
    assert plan.nodes == ("n000", "n001") and plan.resume == "rollback" and plan.attempt == 1
    assert plan.command_id == "c1" and plan.reason == "loss spike" and plan.command_ids == {"c1"}
    named = RoundNote(node="n002", attempt=0, action="restart", command_id="c2", checkpoint="/ck/step_10.pt")
    assert merge_round([plain, named]).checkpoint == "/ck/step_10.pt"


def test_a_first_round_and_a_late_joiner_agree_on_the_attempt():
    assert merge_round([RoundNote(node="a", attempt=0), RoundNote(node="b", attempt=0)]).attempt == 0
    late = merge_round([RoundNote(node="a", attempt=3), RoundNote(node="new", attempt=0)])
    assert late.attempt == 3 and late.action == "" and late.command_id is None


def test_a_note_travels_through_the_store_as_bytes():
    note = RoundNote(node="n1", attempt=2, action="evict", command_id="c", nodes_out=("n9",), previous=("n1", "n9"))
    assert RoundNote.decode(note.encode()) == note


def test_exit_codes_name_the_command_the_workers_obeyed():
    assert action_of_exit_codes([ACTION_EXIT["restart"]]) == "restart"
    assert action_of_exit_codes([ACTION_EXIT["restart"], ACTION_EXIT["evict"]]) == "evict"
    assert action_of_exit_codes([ACTION_EXIT["restart"], 1]) is None  # a crash among them
    assert action_of_exit_codes([]) is None
    assert resume_of("rollback") == "rollback" and resume_of("reattempt") == "latest"
    assert named_checkpoint(cmd("rollback", checkpoint="/ck/step_5.pt")) == "/ck/step_5.pt"
    assert named_checkpoint(cmd("rollback", checkpoint=5)) is None and named_checkpoint(None) is None


def test_a_rank_torch_ended_on_its_peers_exit_does_not_hide_the_code_they_chose():
    # CI (stop 67): rank 0 exited 2 on bad arguments, rank 1, slower, took torch's SIGTERM first
    assert own_exit_codes([-15, 2]) == [2]
    assert own_exit_codes([ACTION_EXIT["evict"], -15]) == [ACTION_EXIT["evict"]]
    assert action_of_exit_codes(own_exit_codes([-15, ACTION_EXIT["restart"]])) == "restart"
    assert own_exit_codes([1, -15, 2]) == [1, 2]  # a crash beside a bad start stays a crash
    assert own_exit_codes([-15, -15]) == [-15]  # all ended from outside: that is what happened
    assert own_exit_codes([-9, 2]) == [-9, 2]  # a kill is a code of its own


def test_the_inbox_drops_what_is_not_this_rounds_business():
    inbox = CommandInbox()
    stale_evict, checks, stacks, done, restart = (cmd("evict", ("gone",)), cmd("run_checks", ("n000",), wait_s=30),
                                                  cmd("capture_stacks"), cmd("restart"), cmd("restart"))
    inbox.done.add(done.id)
    for c in (stale_evict, checks, stacks, done, restart):
        inbox.put(c)
    assert inbox.take(("n000", "n001")) is restart
    assert inbox.checks is checks and inbox.take(("n000", "n001")) is None


def test_after_a_crash_the_wait_ends_with_the_command_and_without_one():
    inbox = CommandInbox()
    assert inbox.after_crash(("n000",), 0.0) is None
    evict = cmd("evict", ("n000",))
    threading.Thread(target=lambda: (time.sleep(0.2), inbox.put(evict)), daemon=True).start()
    assert inbox.after_crash(("n000",), 120.0) is evict  # returns on the command, long before 120 s


def test_run_checks_hold_the_crash_wait_for_their_verdict():
    inbox = CommandInbox()
    inbox.put(cmd("run_checks", ("n000",), wait_s=3600))
    inbox.take(("n000",))
    verdict = cmd("reattempt")
    threading.Thread(target=lambda: (time.sleep(0.6), inbox.put(verdict)), daemon=True).start()
    # a crash_wait of 0.1 s alone would have given up before the verdict came
    assert inbox.after_crash(("n000",), 0.1) is verdict


def test_run_takes_torchruns_own_arguments_and_ours():
    args = build_parser(only="run").parse_args(
        ["run", "--job", "j", "--node-name", "n7", "--crash-wait", "5", "--nnodes", "1:4", "--nproc-per-node", "8",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", "head:29400", "--rdzv-id", "r1", "--max-restarts", "2",
         "train.py", "--lr", "0.1"])
    assert (args.job, args.node_name, args.crash_wait) == ("j", "n7", 5.0)
    assert (args.nnodes, args.nproc_per_node, args.rdzv_endpoint, args.max_restarts) == ("1:4", "8", "head:29400", 2)
    assert args.training_script == "train.py" and args.training_script_args == ["--lr", "0.1"]


def test_run_without_a_job_name_says_so(monkeypatch, capsys):
    for var in ("FAULTLENS_JOB", "SLURM_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    assert main(["run", "--standalone", "train.py"]) == 2
    assert "name the job" in capsys.readouterr().err


@pytest.mark.parametrize("module,extra", [("duckdb", "consumers"), ("torch", "torch"), ("transformers", "hf")])
def test_a_missing_extra_is_named_in_one_line(module, extra):
    line = missing_extra_line("up", ModuleNotFoundError(f"No module named '{module}'", name=module))
    assert line.startswith("faultlens up:") and f"faultlens[{extra}]" in line and "\n" not in line
    assert missing_extra_line("up", ModuleNotFoundError("No module named 'nope'", name="nope")) is None
