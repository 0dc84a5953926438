"""`faultlens run`'s pure rules (trainer_hooks.elastic_commands) and its command line, no broker."""

from __future__ import annotations

import threading
import time

import pytest

from faultlens.cli import build_parser, main
from faultlens.extras import missing_extra_line
from faultlens.events.command import Command
from faultlens.trainer_hooks.elastic_commands import (CommandInbox, RoundNote, action_of_exit_codes, merge_round,
                                                      named_checkpoint, resume_of)
from faultlens.trainer_hooks.exit_codes import ACTION_EXIT


def cmd(action: str, nodes: tuple[str, ...] = (), **params) -> Command:
    now = time.time()
    return Command(job="j", action=action, nodes=nodes, issued_at=now, expires_at=now + 60, reason=f"why {action}",
                   params=params)


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
