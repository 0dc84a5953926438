"""trainer_hooks/worker_exits.py with torch's own ProcessFailure, the node agent's parser and the
real diagnosis engine: what `faultlens run` reports of failed workers is diagnosed, a rank that
died with no word (os._exit) is blamed, not the peer that then lost its connection, and with
workers dead on several nodes the first to die is blamed, whichever node's agent reported first
(issue 58)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from functools import partial

from faultlens.diagnosis.engine.core import Engine
from faultlens.events.envelope import Envelope
from faultlens.parsing.registry import parser_for
from faultlens.trainer_hooks.worker_exits import TIME_KEY, died_at, exit_summary, failure_events, sympathetic
from tests.trainer_hooks.test_torchrun_faultlens_run_broker import ROOT
from tests.trainer_hooks.torch_lazy import needs_torch

pytestmark = needs_torch

PEER_LOST = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:26006: "
             "Connection reset by peer. This is typically caused by a remote worker hanging")
PARSER = partial(parser_for, "nccl", None)  # what `faultlens run` hands the launcher


def recorded(tmp_path, name: str, code: str) -> str:
    """The error file a real worker process leaves: the hook's excepthook, an uncaught exception."""
    path = tmp_path / f"{name}.json"
    env = {**os.environ, "TORCHELASTIC_ERROR_FILE": str(path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", "from faultlens.trainer_hooks.worker_exits import record_uncaught\n"
                          f"record_uncaught()\n{code}"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" in out.stderr  # still printed as before
    return str(path)


def failure(local_rank: int, exitcode: int, error_file: str = "<N/A>"):
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    return ProcessFailure(local_rank=local_rank, pid=1000 + local_rank, exitcode=exitcode, error_file=error_file)


def diagnose(events: list[Envelope], nodes: dict[int, str]) -> list:
    """The real engine over the job's placement (``nodes``: rank → node) and ``events``, read in
    event-time order as the diagnosis consumer reads a job's topics (streams/runner/event_time.py)."""
    events = sorted(events, key=lambda e: e.ts)
    engine = Engine()
    placement = Envelope(ts=events[0].ts - 60, job="job-t", node="-", source="job", kind="topology", data={
        "tp": 1, "pp": 1, "dp": len(nodes),
        "ranks": [{"rank": r, "node": n, "tp": 0, "pp": 0, "dp": r} for r, n in sorted(nodes.items())]})
    return [d for e in [placement, *events] for d in engine.process(e)] + engine.flush()


def test_a_recorded_exception_is_reported_and_diagnosed(tmp_path):
    before = time.time()
    cuda = recorded(tmp_path, "r0", "raise RuntimeError('CUDA error: an illegal memory access was encountered')")
    failures = {0: failure(0, 1, cuda)}
    assert exit_summary(0, failures[0]) == {
        "rank": 0, "local_rank": 0, "pid": 1000, "exit_code": 1, "signal": None,
        "error": "RuntimeError: CUDA error: an illegal memory access was encountered"}
    events = failure_events("job-t", "n000", failures, PARSER, now=time.time() + 10)
    assert {e.node for e in events} == {"n000"} and {e.data.get("rank") for e in events} == {0}
    # Stamped when the worker recorded its exception, to the second's fraction, not when it was reported.
    written = json.load(open(cuda))["message"]["extraInfo"][TIME_KEY]
    assert before <= written <= time.time() and {e.ts for e in events} == {written}
    [d] = [d for d in diagnose(events, {0: "n000"}) if d.fault == "cuda_error"]
    assert d.nodes == ("n000",)


def test_a_rank_that_died_with_no_word_is_blamed_not_the_peer_that_lost_it(tmp_path):
    lost = recorded(tmp_path, "r0", f"raise RuntimeError({PEER_LOST!r})")
    # rank 0 lost its peer (torch then stopped it: SIGTERM); rank 1 left by os._exit(1), no error file
    failures = {0: failure(0, -15, lost), 1: failure(1, 1)}
    assert sympathetic(failures[0]) and not sympathetic(failures[1])
    # The agent last saw both alive after rank 0's peer error was written (the poll interval's race):
    # the echo is still never stamped before the death it echoes.
    seen_alive = json.load(open(lost))["message"]["extraInfo"][TIME_KEY] + 0.05
    events = failure_events("job-t", "n000", failures, PARSER, now=seen_alive + 0.2, alive_at=seen_alive)
    assert events[0].kind == "worker_failed" and events[0].data["rank"] == 1 and events[0].data["wordless"] is True
    assert events[0].ts == seen_alive and min(e.ts for e in events) == seen_alive
    assert exit_summary(0, failures[0])["signal"] == "SIGTERM"
    blamed = [d for d in diagnose(events, {0: "n000", 1: "n000"}) if d.ranks]
    assert blamed and all(d.ranks == (1,) for d in blamed), blamed
    assert "no error of its own" in blamed[0].detail
    # Without the launcher's mark (a node agent reading torchrun's log) the rule is as it was.
    plain = [e for e in events if not e.data.get("wordless")]
    assert [d.ranks for d in diagnose(plain, {0: "n000", 1: "n000"}) if d.ranks] == [(0,)]


def test_across_nodes_the_first_to_die_is_blamed_whichever_agent_reported_first(tmp_path):
    # Two nodes, one rank each. Rank 0 on n000 leaves by os._exit(1); rank 1 on n001 then loses its
    # peer. n001's agent notices at once; n000's agent notices seconds later (a long
    # --monitor-interval, a busy machine), so n001's report reaches the bus first.
    seen_alive = time.time()
    lost = recorded(tmp_path, "r1", f"raise RuntimeError({PEER_LOST!r})")
    peer_error = json.load(open(lost))["message"]["extraInfo"][TIME_KEY]
    first = failure_events("job-t", "n001", {1: failure(0, 1, lost)}, PARSER, now=peer_error + 0.1,
                           alive_at=peer_error - 0.1)
    later = failure_events("job-t", "n000", {0: failure(0, 1)}, PARSER, now=peer_error + 5.0, alive_at=seen_alive)
    # Stamped by death, not by report: n000's rank died after its agent last saw it, before its peer's error.
    assert {e.ts for e in first} == {peer_error} and {e.ts for e in later} == {seen_alive} and seen_alive < peer_error
    blamed = [d for d in diagnose([*first, *later], {0: "n000", 1: "n001"}) if d.ranks]
    assert blamed and all(d.ranks == (0,) and d.nodes == ("n000",) for d in blamed), blamed
    # Stamped by report time instead, the echo on n001 would have opened the incident and been blamed.
    by_report = [Envelope(ts=peer_error + 0.1, job=e.job, node=e.node, source=e.source, kind=e.kind, data=e.data)
                 for e in first] + [Envelope(ts=peer_error + 5.0, job=e.job, node=e.node, source=e.source, kind=e.kind,
                                             data=e.data) for e in later]
    assert [d.ranks for d in diagnose(by_report, {0: "n000", 1: "n001"}) if d.ranks][0] == (1,)


def test_when_a_worker_died_is_what_it_recorded_else_when_it_was_last_seen_alive():
    class Recorded:  # torch's ProcessFailure fields died_at reads
        def __init__(self, data, timestamp):
            self.error_file_data, self.timestamp = data, timestamp

    exact = {"message": {"message": "RuntimeError: x", "extraInfo": {TIME_KEY: 100.25, "timestamp": "100"}}}
    assert died_at(Recorded(exact, 100), noticed=105.0, alive_at=99.0) == 100.25
    whole = {"message": {"message": "RuntimeError: x", "extraInfo": {"timestamp": "100"}}}  # torch's @record
    assert died_at(Recorded(whole, 100), noticed=105.0, alive_at=99.0) == 100.0
    nothing = {"message": "<NONE>"}  # torch's reading of a worker that recorded nothing
    assert died_at(Recorded(nothing, 105), noticed=105.5, alive_at=99.0) == 99.0
    assert died_at(Recorded(nothing, 105), noticed=105.5) == 105.5
