"""Every event the real producers make has a payload Struct (events/payloads.py) and fits it.

The producers run on real inputs: the log parsers over the real-line corpora (tests/fixtures/
log_corpus, the catalogue's own examples, the trainer logs), the simulator's every-class trace and
the recorded foreign traces (raw lines parsed as the node stage parses them, then the node stage's
output: windows, findings, watermarks and the bundles' events), the flood fold, the launchers'
job records and the command acks. A kind added later without a Struct, or a producer that writes a
key its Struct refuses, fails here naming the kind and the field. A second test holds the events
page: every kind it lists has a Struct.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from bench.testbed import foreign
from faultlens.collectors.command_ack import refusal_ack
from faultlens.collectors.flood_fold import Folder
from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.diagnosis.engine.kinds import KNOWN_KINDS
from faultlens.events.bundle import decode_bundled
from faultlens.events.command import Command
from faultlens.events.command_screen import Screened, ack_payload
from faultlens.events.envelope import Envelope, InvalidEvent
from faultlens.events.payloads import PAYLOAD_TYPES, check_payload, payload_type_of, typed
from faultlens.events.payloads_job import CheckReplayDone
from faultlens.events.payloads_log import ParsedLog
from faultlens.events.payloads_node import KernelXid
from faultlens.events.payloads_stage import JobTopology
from faultlens.events.topology import Topology
from faultlens.parsing.registry import LineEventParser, parser_for
from faultlens.parsing.rules import load
from faultlens.simulator import SIM_CLASSES, SimConfig, simulate
from faultlens.streams.runner.loop import Record
from faultlens.trainer_hooks.elastic_commands import RoundNote
from faultlens.trainer_hooks.launcher import Launcher
from faultlens.trainer_hooks.restart_plan import RestartPlan
from tools.log_corpus_score import CORPUS, HELDOUT, events_of, rows

ROOT = Path(__file__).resolve().parents[2]
T = 1_790_000_000.0


def _envelope(parsed) -> Envelope:
    return Envelope(ts=T, job="j", node="n0", source=parsed.source, kind=parsed.kind, data=parsed.data)


def _parsed_corpus() -> list[Envelope]:
    out = [_envelope(p) for files in (rows(CORPUS), rows(HELDOUT)) for rs in files.values() for r in rs
           for p in events_of(r)]
    for rule in load():
        for example in rule.examples:
            for source in (("kernel", "nccl") if rule.source == "any" else (rule.source,)):
                parser = parser_for(source)
                out += [_envelope(p) for p in parser.feed(example.line) + parser.flush()]
    for log in sorted(CORPUS.glob("*.log")):
        parser = parser_for("nccl")
        out += [_envelope(p) for line in log.read_text(encoding="utf-8").splitlines() for p in parser.feed(line)]
        out += [_envelope(p) for p in parser.flush()]
    return out


def _through_the_node_stage(trace: list[Envelope]) -> list[Envelope]:
    """The trace's raw lines parsed, then what the node stage sends the job stage, decoded."""
    lines = LineEventParser()
    parsed = [p for e in trace if e.kind == "line" for p in lines.parse(e)]
    handler = NodeStageHandler()
    records = [Record("telemetry", 0, i, None, e, 0) for i, e in enumerate(trace)]
    outgoing = [o for i in range(0, len(records), 500) for o in handler.handle(records[i:i + 500])]
    outgoing += handler.flush() + handler.watermarks([0, 1])(T, (("telemetry:0",), 6), True, False)
    outgoing += handler.watermarks([0])(float("-inf"))
    stage = []
    for o in outgoing:
        read = decode_bundled(o.value)
        if isinstance(read, Envelope):
            stage.append(read)
        else:
            assert not read.rejected
            stage.append(Envelope.from_dict(json.loads(o.value)))  # the bundle itself
            stage += read.events
    return parsed + stage


@pytest.fixture(scope="module")
def sim_trace() -> list[Envelope]:
    return list(simulate(SimConfig(nodes=8, gpus=4, seed=7, job="job-payloads"), faults=len(SIM_CLASSES)).events())


class _Captured:
    """The launchers' producer: the events they send (the broker path is tests/trainer_hooks')."""

    def __init__(self) -> None:
        self.events: list[Envelope] = []

    def send_event(self, event: Envelope) -> None:
        self.events.append(event)

    def flush(self, *_: object) -> None:
        pass


def _launcher_records(capsys) -> list[Envelope]:
    # Imported here: elastic_run imports torch.distributed.elastic, ~1 CPU-s that every xdist worker
    # would pay at collection for this one test.
    from faultlens.trainer_hooks.elastic_run import JobSide

    sent = _Captured()
    launcher = Launcher.__new__(Launcher)  # its __init__ connects to Kafka; these two only publish
    launcher.job, launcher.nodes, launcher.attempt, launcher.producer = "j", ("n0", "n1"), 2, sent
    launcher.publish_restart(RestartPlan(nodes=("n0", "n2"), nodes_out=("n1",), nodes_in=("n2",), resume="rollback", standby=()), "evicted", "c1")
    launcher.end("gave_up", {"event": "end"})
    side = JobSide(job="j", node="n0", settings=None, verify_key_paths=(), state_dir=None, producer=sent)
    side.begin_round(0, [RoundNote(node="n0", attempt=1, action="restart", command_id="c2", reason="nccl_error",
                                   previous=("n0", "n1")), RoundNote(node="n2", attempt=0)])
    side.end("finished")
    capsys.readouterr()  # their JSON lines on stdout
    return sent.events


def _acks() -> list[Envelope]:
    cmd = Command(job="j", action="run_checks", issued_at=T, expires_at=T + 60, nodes=("n0",))
    return [Envelope(ts=T, job="j", node="n0", source="train", kind="command_ack",
                     data=ack_payload(3, cmd, True, "obeyed")),
            Envelope(ts=T, job="j", node="n0", source="train", kind="command_ack",
                     data=ack_payload(3, None, False, "unreadable", addressed=False)),
            refusal_ack(Screened(cmd, False, "expired"), job="j", node="n0", actions=("run_checks",), ts=T)]


def _folded(corpus: list[Envelope]) -> list[Envelope]:
    folder = Folder(interval_s=5.0)
    for event in (e for e in corpus if e.kind in ("xid", "nccl_warn", "disk_error", "oom_kill")):
        for repeat in range(3):
            folder.admit(Envelope(ts=T + repeat, job="j", node="n0", source=event.source, kind=event.kind,
                                  data=dict(event.data)), None, T + repeat)
    return folder.due(T + 10, all_=True)


def _check_all(events: list[Envelope]) -> Counter:
    kinds: Counter = Counter()
    untyped, refused = set(), []
    for event in events:
        kinds[(event.source, event.kind)] += 1
        if payload_type_of(event) is None:
            untyped.add((event.source, event.kind))
            continue
        try:
            check_payload(event)
        except InvalidEvent as exc:
            refused.append((event.source, event.kind, exc.field, exc.reason, event.data))
    assert not untyped, f"kinds without a payload Struct: {sorted(untyped)}"
    assert not refused, refused[:5]
    return kinds


def test_the_parsers_over_the_real_line_corpora_make_typed_events():
    corpus = _parsed_corpus()
    folded = _folded(corpus)
    assert len(folded) >= 4 and all(e.data["folded"] and e.data["count"] >= 2 for e in folded)
    kinds = _check_all(corpus + folded)
    assert len(kinds) >= 35 and sum(kinds.values()) >= 600, kinds  # the corpus reaches most kinds
    xid = next(e for e in corpus if e.kind == "xid")
    assert typed(xid, KernelXid).xid == xid.data["xid"] and typed(xid, KernelXid).fault == xid.data["fault"]


def test_the_simulator_and_its_node_stage_make_typed_events(sim_trace):
    kinds = _check_all(sim_trace + _through_the_node_stage(sim_trace))
    for kind in (("gpu", "sample"), ("job", "restart"), ("summary", "window"), ("summary", "finding"),
                 ("summary", "watermark"), ("summary", "bundle"), ("nccl", "nccl_timeout")):
        assert kinds[kind], kind


# The recorded traces whose kinds differ (the others are the same samples, steps and beats around
# another fault): a stack dump, a user's CUDA OOM with job records, an Xid from NVML and the
# kernel, a NIC watchdog, an NVML error, a staggered end, a node dying mid-run.
FOREIGN = ("hang_same_step", "user_cuda_oom", "xid_two_sources", "netdev_watchdog", "nvml_unknown_once",
           "job_ends_staggered", "node_dies_16_phased")


def test_the_recorded_foreign_traces_make_typed_events():
    assert set(FOREIGN) <= set(foreign.names())
    events = [e for name in FOREIGN for e in foreign.load(name).events]
    kinds = _check_all(events + _through_the_node_stage(events))
    for kind in (("job", "topology"), ("summary", "window"), ("stack", "stack_dump"), ("gpu", "xid"),
                 ("kernel", "xid"), ("nccl", "exception")):
        assert kinds[kind], kind


def test_the_launchers_acks_and_topology_make_typed_events(capsys):
    grid = Topology.grid(["n0", "n1"], 4, tp=4, pp=2, dp=1).to_event("j", T)
    records = _launcher_records(capsys)
    assert {(e.source, e.kind) for e in records} == {("job", "restart"), ("job", "end")} and len(records) == 4
    kinds = _check_all(records + _acks() + [grid])
    assert kinds[("train", "command_ack")] == 2 and kinds[("check", "command_ack")] == 1 and typed(grid, JobTopology).ranks[7].node == "n1"


def test_a_user_rule_of_its_own_kind_reads_as_the_common_keys():
    event = Envelope(ts=T, job="j", node="n0", source="kernel", kind="my_raid_alarm",
                     data={"line": "raid alarm md0", "fault": "storage", "action": "alert", "severity": "warn",
                           "rule": "site.raid", "array": "md0"})
    assert type(typed(event, ParsedLog)) is ParsedLog and typed(event, ParsedLog).fault == "storage" and event.data["array"] == "md0"
    bad = Envelope(ts=T, job="j", node="n0", source="kernel", kind="my_raid_alarm",
                   data={"line": "x", "fault": "raid", "rule": "site.raid"})
    with pytest.raises(InvalidEvent) as info:
        check_payload(bad)
    assert info.value.field == "data.fault"


def test_every_named_group_of_a_shipped_rule_is_a_field_of_its_kind():
    for rule in load():
        for source in (("kernel", "nccl") if rule.source == "any" else (rule.source,)):
            fields = PAYLOAD_TYPES[(source, rule.kind)].__struct_fields__
            missing = set(rule.pattern.groupindex) - set(fields)
            assert not missing, (rule.id, rule.kind, missing)


def _documented_kinds() -> set[tuple[str, str]]:
    page = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    kinds = set()
    for section in re.split(r"^## ", page, flags=re.M):
        m = re.match(r"source `(\w+)`", section)
        if m is None:
            continue
        for row in re.findall(r"^\| (`[^|]+`) \|", section, flags=re.M):
            kinds |= {(m.group(1), k) for k in re.findall(r"`(\w+)`", row)}
    return kinds


def test_every_kind_the_events_page_lists_has_a_struct():
    documented = _documented_kinds()
    assert len(documented) >= 60 and ("summary", "bundle") in documented and ("kernel", "nfs_ok") in documented
    assert documented - set(PAYLOAD_TYPES) == set()
    assert set(PAYLOAD_TYPES) - documented == set()  # and a Struct names no kind the page lacks


def test_every_kind_the_intake_knows_has_a_struct():
    known = {(source, kind) for source, kinds in KNOWN_KINDS.items() for kind in kinds}
    assert known - set(PAYLOAD_TYPES) == set()


def test_the_collectors_and_the_reproduction_make_typed_events():
    from faultlens.collectors.checks.result import CheckResult
    from faultlens.collectors.checks.suite import result_event
    from faultlens.collectors.gpu_sample import lost_event, responsive_event, unresponsive_event, xid_event
    from faultlens.collectors.heartbeat import beat_event
    from faultlens.collectors.stack_capture import DumpResult, dump_event
    from faultlens.parsing.xid_table import table
    from faultlens.trainer_hooks.reproduction import run_reproduction

    node = {"job": "j", "node": "n0", "ts": T}
    events = [xid_event(i % 8, code, **node) for i, code in enumerate([*table(), 99_999])]
    events += [lost_event(3, "NVML_ERROR_GPU_IS_LOST", **node), responsive_event(None, "nvmlDeviceGetCount", 12.5, **node)]
    events += [unresponsive_event(gpu, "nvmlDeviceGetTemperature", deadline_s=10.0, waited_s=10.0004, handle=handle,
                                  others_answered=7, uuid=uuid, **node)
               for gpu, handle, uuid in ((2, "lost", "GPU-2"), (None, "unknown", None))]
    events += [beat_event(seq=4, pids=[11, 12], sources={"nvml": "ok", "kmsg": "error: gone"}, unranked_pids=[12],
                          health={"blind": [{"what": "kmsg", "why": "gone"}]}, stopping=True, **node)]
    events += [result_event([CheckResult("gpu_health", True, "ok", 0.2),
                             CheckResult("disk", False, "no space on /ckpt", 1.5, timed_out=True),
                             CheckResult("compute", True, "no CUDA", skipped=True)],
                            request_id="c1", diagnosis_id="d1", duration_s=2.0, **node)]
    events += [dump_event(DumpResult(pid, rank, text, ok, timed_out), request_id="c2", rank_env="RANK", **node)
               for pid, rank, text, ok, timed_out in ((41, 0, "Thread 41 (idle)", True, False),
                                                      (None, None, "no training processes found", False, False),
                                                      (42, None, "py-spy timed out", False, True))]
    published: list[Envelope] = []
    cmd = Command(job="j", action="restart", issued_at=T, expires_at=T + 600, diagnosis_id="d2",
                  params={"mode": "dual_phase_replay", "plan": {"horizontal": [["n0", "n1"], ["n2", "n3"]], "vertical": [["n0", "n2"], ["n1", "n3"]]}})
    failing = run_reproduction(cmd, "j", ("n0", "n1", "n2", "n3"),
                               lambda nodes: ({n: (1 if n == "n3" else 0) for n in nodes}, False), 60.0,
                               published.append, lambda _: None)
    assert failing == {"horizontal": [1], "vertical": [1]}
    kinds = _check_all(events + published)
    assert kinds[("gpu", "xid")] > 50 and kinds[("check", "replay")] == 4 and kinds[("check", "replay_done")] == 1
    assert typed(published[-1], CheckReplayDone).failing_vertical == [1]
