"""Each node's clock error, read from its own step stamps against its peers' (no arrival time needed).

In synchronous training every rank ends step k at nearly the same real moment (the gradient
all-reduce holds them together), so a node's stamp for step k less the job's median stamp for k is
its clock's error. Over many steps that is robust, and it needs nothing but the stamps: offline, live,
as a backlog or split, the same events give the same offsets. Its heartbeats are stamped by the same
clock, so liveness judges them on the corrected clock (diagnosis/rules/liveness.py): a machine whose
clock ran 30 s behind stamped its last beat 30 s before its peers' last ones and was evicted as
node_silent at the end of a healthy job (tests/outside/test_outside_sre.py, clock_skew).

The event-time placement (events/event_clock.py) corrects only errors beyond its bound (300 s) and
only live, from arrival times; below that, this is the only measure. Offsets under ``min_s`` are
never used: pipeline stages end a step a fraction of a step apart, and a correction is believed only
where it is steady (its steps agree within a quarter of it, or a second).
"""

from __future__ import annotations

import statistics

from faultlens.diagnosis.rules.base import Finding

RING = 64  # step stamps kept per node
# A job's steps are sampled about this often (every ``stride``-th step number, a power of two, the
# same on every node): in event-time order a clock 120 s behind is read 120 s of steps ahead of its
# peers, and its stamps meet theirs only where each node keeps more than that many seconds of steps.
SAMPLE_S = 8.0
MAX_STRIDE = 1024
MIN_STEPS = 8  # sampled steps compared with the job's before a node's offset is believed
MIN_NODES = 3  # fewer cannot tell the wrong clock from the right ones
SKEW_MIN_S = 10.0
ESTIMATE_EVERY = 8  # new sampled steps (per node, on average) between two estimates of a job


class StepClocks:
    def __init__(self, min_s: float = SKEW_MIN_S) -> None:
        self.min_s = min_s
        self._stamps: dict[str, dict[str, dict[int, float]]] = {}  # job → node → step → its earliest stamp
        self._fresh: dict[str, int] = {}  # job → new (node, step) stamps since its last estimate
        self.strides: dict[str, int] = {}  # job → which step numbers are kept (multiples of it)
        self._evidence: dict[tuple[str, str], str] = {}  # (job, node) → the id of its latest step report
        self.offsets: dict[str, dict[str, float]] = {}  # job → node → its steady error (only those used)
        self._recorded: dict[tuple[str, str], float] = {}  # (job, node) → the offset a record last named

    def observe(self, job: str, node: str, step: int, ts: float, event_id: str, rolled_back: bool) -> list[Finding]:
        """One rank's report that it ended ``step`` at ``ts`` (its node's clock; ``rolled_back``: the
        node's step number went down, those numbers are run again); the clock_skew records of the
        nodes whose offset this step settled or moved."""
        if rolled_back:
            self._stamps.get(job, {}).pop(node, None)
        if step % self.strides.get(job, 1):
            return []  # the usual step report: not sampled
        nodes = self._stamps.get(job)
        if nodes is None:
            nodes = self._stamps[job] = {}
        ring = nodes.get(node)
        if ring is None:
            ring = nodes[node] = {}
        self._evidence[(job, node)] = event_id
        held = ring.get(step)
        if held is None:
            ring[step] = ts
            if len(ring) > RING:
                del ring[next(iter(ring))]
            fresh = self._fresh[job] = self._fresh.get(job, 0) + 1
            if fresh >= ESTIMATE_EVERY * len(nodes) and len(nodes) >= MIN_NODES:
                self._fresh[job] = 0
                return self._estimate(job, nodes, ts)
        elif ts < held:
            ring[step] = ts
        return []

    def forget(self, job: str, node: str) -> None:
        self._stamps.get(job, {}).pop(node, None)
        self.offsets.get(job, {}).pop(node, None)
        for table in (self._evidence, self._recorded):
            table.pop((job, node), None)

    def _estimate(self, job: str, nodes: dict[str, dict[int, float]], ts: float) -> list[Finding]:
        self.strides[job] = self._pace_stride(nodes)
        by_step: dict[int, list[float]] = {}
        for ring in nodes.values():
            for step, t in ring.items():
                by_step.setdefault(step, []).append(t)
        need = max(MIN_NODES, len(nodes) // 2 + 1)
        middle = {step: statistics.median(ts_) for step, ts_ in by_step.items() if len(ts_) >= need}
        offsets = self.offsets.setdefault(job, {})
        now = max(middle.values(), default=ts)  # the job's time: its latest step most nodes ended
        out: list[Finding] = []
        for node, ring in nodes.items():
            errors = [t - middle[step] for step, t in ring.items() if step in middle]
            if len(errors) < MIN_STEPS:
                continue  # too little to go on: whatever was measured before holds
            off = statistics.median(errors)
            spread = statistics.median(abs(e - off) for e in errors)
            if abs(off) >= self.min_s and spread <= max(1.0, abs(off) / 4):
                offsets[node] = off
                said = self._recorded.get((job, node))
                if said is None or abs(said - off) >= self.min_s:
                    self._recorded[(job, node)] = off
                    out.append(self._record(job, node, off, len(errors), now))
            elif abs(off) < self.min_s / 2:
                offsets.pop(node, None)
                self._recorded.pop((job, node), None)
        return out

    @staticmethod
    def _pace_stride(nodes: dict[str, dict[int, float]]) -> int:
        """The stride that samples the job's steps about every SAMPLE_S seconds, by its typical node's pace."""
        paces = []
        for ring in nodes.values():
            if len(ring) >= 2:
                (k0, t0), (k1, t1) = next(iter(ring.items())), next(reversed(ring.items()))
                if k1 > k0 and t1 > t0:
                    paces.append((t1 - t0) / (k1 - k0))
        if not paces:
            return 1
        stride = 1
        while stride < MAX_STRIDE and stride * 2 * statistics.median(paces) <= SAMPLE_S:
            stride *= 2
        return stride

    def _record(self, job: str, node: str, off: float, steps: int, ts: float) -> Finding:
        side = "behind" if off < 0 else "ahead of"
        return Finding(
            job=job,
            ts=ts,
            onset=ts,
            fault="clock_skew",
            action="none",
            nodes=(node,),
            entity="clock",
            evidence=(self._evidence[(job, node)],),
            detail=f"the clock of {node} runs {abs(off):.0f}s {side} its peers' in job {job}: its stamps for the "
            f"same training steps differ from the job's median by that much over its last {steps} steps "
            f"(a synchronous job ends each step together); its heartbeats are judged on the corrected "
            f"clock (recorded, no eviction)",
        )
