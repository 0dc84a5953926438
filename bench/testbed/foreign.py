"""Loader of the foreign traces under tests/fixtures/foreign/ (written by hand from docs/events.md).

A fixture is JSON lines. Each line is one of:

* an event envelope as docs/events.md gives it, with ``ts`` in seconds from the trace start
  (raw kernel / trainer log lines, NVML ``lost`` / ``xid`` events, stack dumps, restarts);
* ``{"topology": {"nodes": [...], "gpus_per_node", "tp", "pp", "dp"}}``: the job's layout
  (the usual Megatron grid, written out as the ``job``/``topology`` event);
* ``{"series": "gpu" | "step" | "beat", ...}``: a periodic stream a hand cannot write line by line
  (an NVML sample every second on every node), given as a base payload, a jitter per field
  (uniform ± the value, from a fixed seed) and ``override`` entries that change it for some
  nodes / GPUs / ranks over a time span;
* ``{"label": {...}}``: the ground truth (docs/design.md §8), ``onset`` in seconds from the start.

Nothing here knows the simulator; the numbers in the fixtures are a real H100 job's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Iterator

from faultlens.events.envelope import Envelope
from faultlens.events.topology import Topology
from faultlens.events.trace import _check_label as check_label
from faultlens.events.trace import trace_order

# The cases are the test suite's data (read, never imported): the benches run the same ones.
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "foreign"
T0 = 1767225600.0


def _nodes(spec: Any, all_nodes: list[str]) -> list[str]:
    return list(all_nodes) if spec in (None, "all") else list(spec)


def _within(o: dict, t: float) -> bool:
    return o.get("from", float("-inf")) <= t < o.get("to", float("inf"))


class _Jitter:
    """A base row with a uniform jitter (± the value) on each of its numeric fields, drawn anew each
    :meth:`row`. A series draws one per sample, GPU and rank (~120,000 a case): which fields are
    numeric is found once, and ``rng.uniform(-amp, amp)`` is its own arithmetic (``a + (b - a) *
    random()``) on the same draws, so every seed gives the events it gave."""

    def __init__(self, base: dict, jitter: dict) -> None:
        self.base = base
        self.plan = [(key, -amp, amp - -amp) for key, amp in jitter.items()
                     if isinstance(base.get(key), (int, float)) and not isinstance(base.get(key), bool)]

    def row(self, random: Any) -> dict:
        out = dict(self.base)
        for key, low, span in self.plan:
            out[key] = round(out[key] + (low + span * random()), 3)
        return out


def _apply(row: dict, o: dict) -> dict:
    row = dict(row)
    row.update(o.get("set", {}))
    for key, delta in o.get("add", {}).items():
        if isinstance(row.get(key), (int, float)):
            row[key] = round(row[key] + delta, 3)
    for key, factor in o.get("scale", {}).items():
        if isinstance(row.get(key), (int, float)):
            row[key] = round(row[key] * factor, 4)
    return row


class Trace:
    def __init__(self, name: str, job: str | None = None):
        self.name = name
        self.job = job or f"foreign-{name}"  # one job per case, so cases scored together never match each other
        self._prefix = name if job is None else job  # event ids unique across seeds of one case
        self.events: list[Envelope] = []
        self.labels: list[dict] = []
        self.topology: Topology | None = None
        self._n = 0

    def _id(self) -> str:
        self._n += 1
        return f"{self._prefix}-{self._n}"

    def add(self, ts: float, node: str, source: str, kind: str, data: dict) -> None:
        self.events.append(Envelope(ts=T0 + ts, job=self.job, node=node, source=source, kind=kind, data=data, id=self._id()))

    # --- series ---------------------------------------------------------------------------
    def gpu(self, s: dict, rng: random.Random) -> None:
        nodes, every = _nodes(s.get("nodes"), list(self.topology.nodes)), float(s.get("every", 1.0))
        gpus = int(s.get("gpus", 8))
        node_offset = {n: rng.uniform(-s.get("node_spread_c", 0.0), s.get("node_spread_c", 0.0)) for n in nodes}
        gpu_offset = {(n, g): rng.uniform(-s.get("gpu_spread_c", 0.0), s.get("gpu_spread_c", 0.0))
                      for n in nodes for g in range(gpus)}
        overrides = s.get("override", ())
        # Who each override is about, found once: a sample asks only whether its time is within.
        drops = {n: [o for o in overrides if n in o.get("nodes", [n]) and o.get("drop")] for n in nodes}
        changes = {(n, g): [o for o in overrides if n in o.get("nodes", [n]) and g in o.get("gpus", [g])]
                   for n in nodes for g in range(gpus)}
        jitter, draw = _Jitter(s["gpu"], s.get("jitter", {})), rng.random
        uuids = {(n, g): f"GPU-{n}-{g}" for n in nodes for g in range(gpus)}
        warm = isinstance(s["gpu"].get("temp_c"), (int, float))  # jittered, a number stays one
        t = float(s.get("from", 0.0))
        while t < s["to"]:
            for node in nodes:
                if any(_within(o, t) for o in drops[node]):
                    continue  # the agent that samples this node is gone
                rows = []
                for g in range(gpus):
                    row = jitter.row(draw)
                    row["index"], row["uuid"] = g, uuids[(node, g)]
                    if warm:
                        row["temp_c"] = round(row["temp_c"] + node_offset[node] + gpu_offset[(node, g)], 1)
                    for o in changes[(node, g)]:
                        if _within(o, t):
                            row = _apply(row, o)
                    if row.get("sm_clock_mhz") is not None:
                        row["sm_clock_mhz"] = int(min(row["sm_clock_mhz"], row.get("sm_clock_max_mhz", 1980)))
                    if row.get("util") is not None:
                        row["util"] = max(0.0, min(100.0, row["util"]))
                    rows.append(row)
                self.add(t, node, "gpu", "sample", {"gpus": rows, "interval_s": every})
            t += every

    def step(self, s: dict, rng: random.Random) -> None:
        """Synchronous training: every rank reports each step at about the same time; a step takes
        the slowest rank's compute plus the collectives, and every rank's step_time_s is that."""
        topo = self.topology
        t, n = float(s.get("from", 0.0)), int(s.get("step0", 1000))
        stop = s.get("stop_at", float("inf"))
        jitter = _Jitter(s["data"], s.get("jitter", {}))
        while t < min(s["to"], stop):
            rows = {}
            for place in topo.ranks:
                row = jitter.row(rng.random)
                for o in s.get("override", ()):
                    if place.rank in o.get("ranks", [place.rank]) and place.node in o.get("nodes", [place.node]) and _within(o, t):
                        row = _apply(row, o)
                rows[place.rank] = row
            comm = float(s.get("comm_s", 2.0))
            pause = sum(o.get("pause_s", 0.0) for o in s.get("pauses", ()) if o["at"] <= t < o["at"] + s.get("every", 10.0))
            step_time = max(r["compute_s"] for r in rows.values()) + comm + pause
            loss = s.get("loss0", 2.4) * (1.0 - 0.0004 * (n - int(s.get("step0", 1000))))
            for place in topo.ranks:
                row = rows[place.rank]
                self.add(t + rng.uniform(0, 0.05), place.node, "train", "step", {
                    "rank": place.rank, "step": n, "loss": round(loss + rng.uniform(-0.01, 0.01), 4),
                    "grad_norm": round(0.9 + rng.uniform(-0.1, 0.1), 3), "step_time_s": round(step_time, 3),
                    "tokens": 4194304, "tokens_per_s": round(4194304 / step_time, 1), "mfu": 0.41,
                    "compute_s": round(row["compute_s"], 3)})
            n += 1
            t += step_time

    def beat(self, s: dict, rng: random.Random) -> None:
        """Every ``every`` seconds; ``phase_s`` gives each node's agent its own phase, drawn over that
        many seconds (a fleet's agents never start together), else all beat within 0.2 s."""
        names = _nodes(s.get("nodes"), list(self.topology.nodes))
        phase = {node: rng.uniform(0, float(s["phase_s"])) for node in names} if s.get("phase_s") else None
        t, seq = float(s.get("from", 0.0)), 0
        while t < s["to"]:
            seq += 1
            for node in names:
                if any(node in o.get("nodes", [node]) and _within(o, t) and o.get("drop") for o in s.get("override", ())):
                    continue
                at = t + (phase[node] if phase else rng.uniform(0, 0.2))
                if at < s["to"]:
                    data = {"seq": seq, "pids": [4000 + g for g in range(8)], "sources": {"nvml": "ok", "kernel_log": "ok"}}
                    for o in s.get("override", ()):  # {"set": {"pids": []}}: the trainer has exited
                        if node in o.get("nodes", [node]) and _within(o, at) and not o.get("drop"):
                            data.update(o.get("set", {}))
                    self.add(at, node, "heartbeat", "beat", data)
            t += float(s.get("every", 5.0))


def _lines(name: str) -> Iterator[str]:
    """The fixture's lines, ``{"include": "other"}`` lines replaced by that file's (a shared background)."""
    for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines():
        if line.startswith('{"include"'):
            yield from _lines(json.loads(line)["include"])
        else:
            yield line


def load(name: str, seed: int | None = None) -> Trace:
    """The events (in trace order) and labels of ``tests/fixtures/foreign/<name>.jsonl``; another
    ``seed`` draws the case's jitter and beat phases anew, as job ``foreign-<name>-<seed>``."""
    trace = Trace(name, None if seed is None else f"foreign-{name}-{seed}")
    rng = random.Random(name if seed is None else f"{name}#{seed}")
    series: list[dict] = []
    for line in _lines(name):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        obj = json.loads(line)
        if "topology" in obj:
            spec = obj["topology"]
            trace.topology = Topology.grid(spec["nodes"], spec["gpus_per_node"], spec["tp"], spec["pp"], spec["dp"])
            trace.events.append(trace.topology.to_event(trace.job, T0, event_id=f"{trace._prefix}-topology"))
        elif "series" in obj:
            series.append(dict(obj, override=list(obj.get("override", ()))))
        elif "override" in obj:
            # A case's change to a background series: {"override": "gpu", "nodes": [...], "from": ..., "set": {...}}
            # ({"override": "step", "series_set": {"stop_at": 400}} changes the series itself).
            for s in series:
                if s["series"] == obj["override"] and s.get("name") == obj.get("name"):
                    s.update(obj.get("series_set", {}))
                    if "series_set" not in obj:
                        s["override"].append(obj)
        elif "label" in obj:
            label = dict(obj["label"], job=trace.job)
            label["onset"] = T0 + float(label["onset"])
            trace.labels.append(check_label(label, f"{name}.jsonl"))  # docs/design.md §8's label shape
        else:
            trace.add(float(obj["ts"]), obj.get("node", "-"), obj["source"], obj["kind"], obj.get("data", {}))
    for s in series:
        getattr(trace, s["series"])(s, rng)
    trace.events.sort(key=trace_order)
    return trace


def names() -> list[str]:
    """Every case (files starting with ``_`` are shared parts, not cases)."""
    return [p.stem for p in sorted(FIXTURES.glob("*.jsonl")) if not p.stem.startswith("_")]


def save(trace: Trace, path: str | Path) -> Path:
    """``trace`` as a Parquet file at ``path``, its labels beside it: what `faultlens check` reads."""
    from faultlens.events.trace import labels_path, write_labels, write_trace

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_trace(path, trace.events)
    write_labels(labels_path(path), trace.labels)
    return path


def write_parquet(name: str, out_dir: str | Path) -> Path:
    """The case as a Parquet trace (``OUT/<name>.parquet``, labels beside it)."""
    return save(load(name), Path(out_dir) / f"{name}.parquet")


if __name__ == "__main__":
    # python -m bench.testbed.foreign OUT_DIR [NAME...]: write cases as Parquet traces (all by default)
    import sys

    for case in sys.argv[2:] or names():
        print(write_parquet(case, sys.argv[1]))
