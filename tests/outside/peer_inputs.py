"""The peers' own test inputs, as faultlens inputs: what another fault-tolerance project feeds its detector.

    python -m tests.outside.peer_inputs OUT_DIR

Round 3 of the outside check (helper O5). NVIDIA's nvidia-resiliency-ext tests its Flight Recorder
attribution (`CollectiveAnalyzer`) on real dumps of a 16-rank Megatron MoE job into which it injected
faults on two ranks (tests/attribution/unit/fr_traces/<case>/, `fault_injection.log` naming them, and
reference_outputs/<case>_reference.txt the ranks its analyser finds missing). Those pickles, read with
every class refused and written as JSON, are tests/fixtures/outside/peers/nvrx_fr_<case>.json.gz (each
with its provenance, the injection log and the reference table). Here they become what docs/events.md
says a trainer hook sends on a capture: one `stack`/`recorder_dump` a rank, `dump` the JSON text.

The job around them is what the dumps' own process groups say (`pg_config`, Megatron's
tensor-data-pipeline order, rank = tp + TP dp + TP DP pp): the GPU_ERROR runs are tensor parallel 2
([0, 1]), data parallel 2 ([0, 2]), pipeline 4 ([0, 4, 8, 12]); the LOCK_GIL runs tensor parallel 4,
data parallel 2, pipeline 2. The machines are not in the dumps: four machines of 4 GPUs is this
file's assumption (8 a machine would put every faulty rank on one machine and say less).
Telemetry is round 1's (tests/outside/telemetry.py): 200 s of training, no step after, and the dumps
80 s later, as a capture_stacks answer comes. The job's clock is set so its last step is the dumps'
newest collective (2025-09-23).
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.outside.dump_shapes import Shape, gpus_per_node
from tests.outside.job_shape import Job, Trace
from tests.outside.telemetry import Knobs, write_job
from tests.outside.write_traces import write_scenarios, writer_main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "outside" / "peers"
CASES = ("gpu_error_1st", "gpu_error_2nd", "lock_gil_1st", "lock_gil_2nd")
GPUS = 4
_AXES = {"tp": "TENSOR_MODEL_PARALLEL_GROUP", "dp": "DATA_PARALLEL_GROUP_WITH_CP", "pp": "PIPELINE_MODEL_PARALLEL_GROUP"}
LENGTH = 420.0
HANG_AT = 200.0
DUMP_AFTER = 80.0
SLACK = 60.0


@dataclass
class PeerCase:
    """One peer test input: the job it was, the ranks the peer names and the faults it injected."""

    name: str
    dumps: list[dict]
    injected: list[int]  # fault_injection.log's `Fault ranks`
    named: list[int]  # the ranks the peer's analyser reports missing (its reference output)

    def sizes(self) -> dict[str, int]:
        """tp, dp, pp: the sizes of rank 0's groups of those names in its pg_config."""
        config = self.dumps[0]["pg_config"].values()
        return {axis: next(len(json.loads(g["ranks"])) for g in config if g["desc"] == desc) for axis, desc in _AXES.items()}

    def job(self) -> Job:
        n = self.sizes()
        tp, dp, pp = n["tp"], n["dp"], n["pp"]
        placement = [(r, r // GPUS, r % tp, r // (tp * dp), (r // tp) % dp) for r in range(len(self.dumps))]
        return Shape(f"nvrx-{self.name.replace('_', '')}", len(self.dumps) // GPUS, GPUS, tp, pp, dp, placement).job()

    def nodes(self, ranks: list[int]) -> set[str]:
        job = self.job()
        return {job.node_of(r) for r in ranks}


def load(name: str) -> PeerCase:
    doc = json.loads(gzip.decompress((FIXTURES / f"nvrx_fr_{name}.json.gz").read_bytes()))
    injected = [int(r) for r in re.findall(r"\d+", doc["fault_injection"].splitlines()[0])]
    named: set[int] = set()
    for line in doc["reference"].splitlines()[1:]:
        cells = [c.strip() for c in line.split("|")]
        named |= {int(r) for r in cells[-1].split(",") if r.strip()}
    return PeerCase(name, doc["dumps"], injected, sorted(named))


def _newest_s(dumps: list[dict]) -> float:
    return max(e["time_created_ns"] for d in dumps for e in d["entries"]) / 1e9


def write_trace(case: PeerCase, trace: Trace) -> tuple[Job, float]:
    """The job's telemetry and the recorder dumps; returns the job and its start."""
    job = case.job()
    base = float(int(_newest_s(case.dumps) - HANG_AT))
    with gpus_per_node(GPUS):
        write_job(trace, job, base, LENGTH, Knobs(steps_stop=HANG_AT))
    at = base + HANG_AT + DUMP_AFTER
    for rank, dump in enumerate(case.dumps):
        node = job.node_of(rank)
        pid = 41_000 + 10 * job.nodes.index(node) + job.ranks_of(node).index(rank)
        text = json.dumps(dump, separators=(",", ":"))
        trace.emit(
            at + 0.02 * rank,
            job.name,
            node,
            "stack",
            "recorder_dump",
            {
                "rank": rank,
                "pid": pid,
                "dump": text,
                "entries": len(dump["entries"]),
                "truncated": False,
                "request_id": f"{job.name}-capture-1",
            },
        )
    return job, base


def expected(case: PeerCase, job: Job, base: float) -> list[dict]:
    """What a person who trusts the peer's analyser expects: a hang, the machines of the ranks it
    names evicted (the faults were injected software faults, which no dump tells from a machine's:
    the recorder's best word, as round 2's two stuck loaders), an alert were they most of the job."""
    nodes = case.nodes(case.named)
    most = len(nodes) * 2 > len(job.nodes)
    return [
        {
            "job": job.name,
            "fault": "job_hang",
            "nodes": [] if most else sorted(nodes),
            "action": "alert" if most else "evict",
            "onset_from": base + HANG_AT - SLACK,
            "onset_to": base + HANG_AT + DUMP_AFTER + SLACK,
        }
    ]


def _case(name: str):
    """CASES' scenario ``name``: the peer's job written into a trace; it starts where the dumps say
    (its own base, not the writer's), and its expect is :func:`expected`'s."""
    def scenario(trace: Trace, _start: float) -> tuple[PeerCase, list[dict]]:
        case = load(name)
        job, base = write_trace(case, trace)
        return case, expected(case, job, base)
    return scenario


def write_all(out: Path, names: list[str] | None = None) -> dict[str, PeerCase]:
    written = write_scenarios(out, {name: _case(name) for name in CASES}, names, seed=300, start=lambda i, k: 0.0,
                              expect=lambda result: result[1])
    return {name: case for name, (case, _) in written.items()}


def main(argv: list[str] | None = None) -> int:
    return writer_main(argv, __doc__, CASES, write_all)


if __name__ == "__main__":
    sys.exit(main())
