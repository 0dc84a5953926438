"""Hang onset → signed evict command at the hook, p50/p99 over many jobs hanging at once.

    .venv/bin/python -m bench.bench_hang_latency [--jobs 100] [--hang-floor 60] [--bootstrap HOST:PORT]

Real `faultlens diagnose` and `faultlens remediate --act-on-all` processes on the broker; a fleet
driver in this process plays ``--jobs`` small training jobs (4 nodes × 2 GPUs, TP=2, PP=2, DP=2):
per-rank step telemetry every ``--step-time`` seconds and node heartbeats listing live pids.
After a warm-up every job's culprit rank stops stepping (the onset: its last step's timestamp),
the rest stop a step later, heartbeats go on. The driver answers each signed ``capture_stacks``
command the way the node agents would (one py-spy dump per rank: the culprit's machine in
``all_gather_into_tensor``, its pipeline peers in ``isend``/``irecv``, the rest in the gradient
sync) and times the signed ``evict`` each job's hook accepts (events.command_screen, as a trainer
does). A job whose evict misses the culprit's machine counts as wrong.

The latency is the stall floor (the detector's patience, ``--hang-floor``) plus the pipeline:
suspicion → capture command → dumps → clustering → diagnosis → command. Both are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from bench.common import bench_broker
from faultlens.demo import processes as pipeline
from faultlens.events.command import Command
from faultlens.events.command_screen import CommandScreen
from faultlens.events.envelope import Envelope
from faultlens.events.signing import SIGNING_KEY_ENV, SigningKey, write_key_pair
from faultlens.events.topology import Topology
from faultlens.simulator.faults import hang_states
from faultlens.simulator.stacks import py_spy_dump
from faultlens.streams.command_listener import CommandListener
from faultlens.streams.producer import Producer

KEY = SigningKey.generate()  # the bench is its own deployment
GPUS, TP, PP, DP = 2, 2, 2, 2


class Fleet:
    """Many small jobs' telemetry, published from one thread; answers capture requests."""

    def __init__(self, producer: Producer, jobs: int, step_time: float):
        self.producer = producer
        self.step_time = step_time
        self.lock = threading.Lock()
        self.jobs = {}
        for i in range(jobs):
            job = f"hang-{uuid.uuid4().hex[:6]}-{i}"
            nodes = [f"{job}-n{k}" for k in range(TP * PP * DP // GPUS)]
            topo = Topology.grid(nodes, GPUS, TP, PP, DP)
            culprit = int(np.random.default_rng(i).choice([p.rank for p in topo.ranks if p.pp == PP - 1]))
            self.jobs[job] = {"topo": topo, "culprit": culprit, "step": 0, "stopped": set(), "onset": None,
                              "evict": None, "captures": 0}
        self.hung = False

    def publish_topologies(self) -> None:
        for job, j in self.jobs.items():
            self.producer.send_event(j["topo"].to_event(job, time.time()))
        self.producer.flush()

    def tick(self, beat: bool) -> None:
        now = time.time()
        with self.lock:
            for job, j in self.jobs.items():
                topo = j["topo"]
                j["step"] += 1
                for p in topo.ranks:
                    if p.rank in j["stopped"]:
                        continue
                    self.producer.send_event(Envelope(ts=now, job=job, node=p.node, source="train", kind="step", data={
                        "rank": p.rank, "step": j["step"], "loss": 2.0, "step_time_s": self.step_time,
                        "compute_s": self.step_time * 0.8}))
                    if self.hung and p.rank == j["culprit"]:
                        j["onset"] = now  # the culprit's last step
                if self.hung:
                    # The culprit stops first, everyone else one step later (they wait on it).
                    j["stopped"] = set(p.rank for p in topo.ranks) if j["stopped"] else {j["culprit"]}
                if beat:
                    for node in topo.nodes:
                        pids = [1000 + r for r in topo.ranks_by_node[node]]
                        self.producer.send_event(Envelope(ts=now, job=job, node=node, source="heartbeat", kind="beat",
                                                          data={"seq": j["step"], "pids": pids}))
        self.producer.flush()

    def on_command(self, cmd: Command) -> None:
        j = self.jobs.get(cmd.job)
        if j is None:
            return
        if cmd.action == "capture_stacks":
            j["captures"] += 1
            states = hang_states(j["topo"], j["culprit"])
            now = time.time()
            for p in j["topo"].ranks:
                if cmd.nodes and p.node not in cmd.nodes:
                    continue
                self.producer.send_event(Envelope(ts=now, job=cmd.job, node=p.node, source="stack", kind="stack_dump",
                                                  data={"rank": p.rank, "pid": 1000 + p.rank, "request_id": cmd.id,
                                                        "tool": "py-spy", "ok": True,
                                                        "dump": py_spy_dump(1000 + p.rank, states[p.rank])}))
            self.producer.flush()
        elif cmd.action == "evict" and j["evict"] is None:
            j["evict"] = (time.time(), cmd)


class FleetScreen:
    """One hook-style screen per job: the command must be signed, fresh, new and for that job."""

    def __init__(self, jobs):
        self.screens = {job: CommandScreen(KEY.verify_keys(), job) for job in jobs}

    def screen(self, raw, now):
        cmd = Command.decode(raw) if raw else None
        target = self.screens.get(cmd.job) if cmd else None
        if target is None:
            return CommandScreen(KEY.verify_keys(), "-").screen(raw, now)
        return target.screen(raw, now)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--hang-floor", type=float, default=60.0, help="diagnose's stall floor (production default 60 s)")
    ap.add_argument("--step-time", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds of healthy steps before the hang")
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--bootstrap")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-hang-"))
    private, _ = write_key_pair(work / "keys", KEY)
    env = {**os.environ, SIGNING_KEY_ENV: str(private), "FAULTLENS_HOME": str(work)}
    with bench_broker(args.bootstrap) as settings:
        tag = uuid.uuid4().hex[:6]
        procs = [
            pipeline.faultlens("diagnose", ["diagnose", "--bootstrap", settings.bootstrap, "--group", f"d-{tag}",
                                            "--grace", "5", "--hang-floor", str(args.hang_floor)], env, work),
            pipeline.faultlens("remediate", ["remediate", "--bootstrap", settings.bootstrap, "--act-on-all",
                                             "--max-evictions", "1000000", "--max-job-share", "1",
                                             "--breaker-share", "1", "--group", f"r-{tag}"], env, work),
        ]
        producer = Producer(settings)
        fleet = Fleet(producer, args.jobs, args.step_time)
        listener = CommandListener(settings, FleetScreen(fleet.jobs), fleet.on_command)
        listener.start()
        try:
            if not listener.ready.wait(60):
                raise SystemExit("the command listener never reached the commands topic")
            fleet.publish_topologies()
            start = time.time()
            k = 0
            while time.time() - start < args.warmup + args.timeout:
                fleet.hung = fleet.hung or time.time() - start >= args.warmup
                fleet.tick(beat=k % 2 == 0)
                k += 1
                if fleet.hung and all(j["evict"] for j in fleet.jobs.values()):
                    break
                time.sleep(args.step_time)
            done = [(j["evict"][0] - j["onset"], j) for j in fleet.jobs.values() if j["evict"] and j["onset"]]
            lat = np.array([d for d, _ in done]) if done else np.array([float("nan")])
            wrong = sum(1 for _, j in done if j["topo"].by_rank[j["culprit"]].node not in j["evict"][1].nodes)
            print(json.dumps({
                "stage": "hang_to_evict_at_hook", "jobs": args.jobs, "evicted": len(done), "lost": args.jobs - len(done),
                "wrong_group": wrong, "hang_floor_s": args.hang_floor, "step_time_s": args.step_time,
                "p50_s": round(float(np.percentile(lat, 50)), 2), "p99_s": round(float(np.percentile(lat, 99)), 2),
                "max_s": round(float(np.max(lat)), 2),
                "pipeline_p50_s": round(float(np.percentile(lat, 50)) - args.hang_floor, 2),
                "pipeline_p99_s": round(float(np.percentile(lat, 99)) - args.hang_floor, 2),
            }))
        finally:
            listener.stop()
            producer.close()
            for p in procs:
                p.stop()


if __name__ == "__main__":
    main()
