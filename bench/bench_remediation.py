"""Latency to a command at the trainer hook, over the real broker and real `faultlens` processes.

    .venv/bin/python -m bench.bench_remediation --runs 100 [--bootstrap HOST:PORT] [--hang-runs 1]

Stages measured (each a separate JSON line with n, p50, p99, mean, max in seconds):
- ``diagnosis_to_hook``: a diagnosis (gpu_lost, evict) produced to `diagnoses` → `faultlens
  remediate` → the signed evict command accepted by a trainer-hook listener;
- ``xid_to_hook``: a raw kernel log line with Xid 79 published as `kernel`/`line` → `faultlens
  diagnose` parses and diagnoses it → remediate → the hook's listener (skipped when the diagnosis
  consumer is not built); the node agent's file-following delay is not included;
- ``hang_to_evict`` (``--hang-runs`` > 0): the reference trainer under the launcher with one hung
  rank, `faultlens collect` per node, diagnose and remediate; from the hung rank's last step
  telemetry to the evict command at the launcher's listener. Each run waits out the hang
  detector's stall floor (60 s by default), so it is off unless asked for.

Every run uses a new node name so dedup (diagnosis engine and remediation) never folds runs;
remediation's caps are opened wide for the bench (they are tested, not timed, elsewhere).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import queue
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.common import bench_broker
from faultlens.demo import processes as pipeline
from faultlens.events.command import Command
from faultlens.events.command_screen import CommandScreen
from faultlens.events.diagnosis_record import Diagnosis
from faultlens.events.envelope import Envelope, decode
from faultlens.events.signing import SIGNING_KEY_ENV, SigningKey, write_key_pair
from faultlens.events.topology import Topology
from faultlens.streams.command_listener import CommandListener
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer
from faultlens.streams.reader import read_topic

KEY = SigningKey.generate()  # the bench is its own deployment
XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."


def summary(stage: str, samples: list[float], **extra) -> dict:
    a = np.asarray(samples)
    out = {"stage": stage, "n": len(samples), **extra}
    if len(a):
        out.update(p50_s=round(float(np.percentile(a, 50)), 4), p99_s=round(float(np.percentile(a, 99)), 4),
                   mean_s=round(float(a.mean()), 4), max_s=round(float(a.max()), 4))
    return out


class Arrivals:
    """A job-level hook listener; ``wait(pred)`` returns the arrival time of a matching command."""

    def __init__(self, settings: KafkaSettings, job: str):
        self.q: queue.Queue[tuple[float, Command]] = queue.Queue()
        self.listener = CommandListener(settings, CommandScreen(KEY.verify_keys(), job),
                                        lambda c: self.q.put((time.time(), c)))
        self.listener.start()
        if not self.listener.ready.wait(30):
            raise RuntimeError("hook listener not ready")

    def wait(self, pred, timeout: float) -> tuple[float, Command] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                t, c = self.q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if pred(c):
                return t, c
        return None


def run_fast_stages(settings: KafkaSettings, runs: int, work: Path, env: dict, with_xid: bool) -> list[dict]:
    job = f"bench-{uuid.uuid4().hex[:6]}"
    nodes = [f"n{i:04d}" for i in range(4 * runs)]  # room to spare: the breaker counts the share of known nodes
    procs = [pipeline.faultlens("remediate", [
        "remediate", "--bootstrap", settings.bootstrap, "--act-on-all", "--dedup", "0", "--max-evictions", "1000000",
        "--max-job-share", "1", "--breaker-share", "1", "--group", f"rem-{job}"], env, work)]
    if with_xid:
        procs.append(pipeline.faultlens("diagnose", ["diagnose", "--bootstrap", settings.bootstrap,
                                                     "--group", f"diag-{job}", "--grace", "5"], env, work))
    arrivals = Arrivals(settings, job)
    out = []
    try:
        with Producer(settings) as producer:
            producer.send_event(Topology.grid(nodes, 1, 1, 1, len(nodes)).to_event(job, time.time()))
            producer.flush()
            # Warm-up: the first record waits for the consumer group to form; it is not a sample.
            warm = Diagnosis(job=job, ts=time.time(), onset=time.time(), fault="gpu_lost", action="evict", nodes=("warm",))
            producer.send("diagnoses", job.encode(), warm.encode())
            producer.flush()
            if arrivals.wait(lambda c: c.diagnosis_id == warm.id, 90) is None:
                raise RuntimeError("remediate never answered the warm-up diagnosis; see " + str(procs[0].log_path))

            samples = []
            for k in tqdm(range(runs), desc="diagnosis → hook", unit="run"):
                d = Diagnosis(job=job, ts=time.time(), onset=time.time(), fault="gpu_lost", action="evict",
                              nodes=(nodes[k],), confidence=0.99)
                t0 = time.time()
                producer.send("diagnoses", job.encode(), d.encode())
                producer.flush()
                got = arrivals.wait(lambda c, i=d.id: c.diagnosis_id == i, 30)
                if got:
                    samples.append(got[0] - t0)
            out.append(summary("diagnosis_to_hook", samples, lost=runs - len(samples)))

            if with_xid:
                samples = []
                for k in tqdm(range(runs), desc="xid line → hook", unit="run"):
                    node = nodes[runs + k]
                    t0 = time.time()
                    producer.send_event(Envelope(ts=t0, job=job, node=node, source="kernel", kind="line",
                                                 data={"line": XID_79}))
                    producer.flush()
                    got = arrivals.wait(lambda c, n=node: c.action == "evict" and n in c.nodes, 60)
                    if got:
                        samples.append(got[0] - t0)
                out.append(summary("xid_to_hook", samples, lost=runs - len(samples)))
    finally:
        arrivals.listener.stop()
        for p in procs:
            p.stop()
    return out


def run_hang(settings: KafkaSettings, runs: int, work: Path, env: dict) -> dict:
    samples = []
    for _ in tqdm(range(runs), desc="hang → evict", unit="run"):
        job = f"bench-hang-{uuid.uuid4().hex[:6]}"
        run_dir = work / job
        procs = [pipeline.faultlens("diagnose", ["diagnose", "--bootstrap", settings.bootstrap, "--group", f"d-{job}",
                                                 "--grace", "5"], env, run_dir),
                 pipeline.faultlens("remediate", ["remediate", "--bootstrap", settings.bootstrap, "--act-on", job,
                                                  "--max-job-share", "0.5", "--breaker-share", "1", "--group", f"r-{job}"],
                                    env, run_dir)]
        for n in range(4):
            node = f"n{n:03d}"
            procs.append(pipeline.faultlens(f"collect-{node}", [
                "collect", "--bootstrap", settings.bootstrap, "--job", job, "--node", node, "--no-nvml", "--no-kernel",
                "--heartbeat-interval", "2", "--proc-pattern", rf"reference_trainer --node {node}\b"], env, run_dir))
        arrivals = Arrivals(settings, job)
        procs.append(pipeline.launcher(
            ["--job", job, "--nodes", "4", "--standby", "s000,s001", "--grace", "3"],
            ["--ckpt-dir", str(run_dir / "ckpt"), "--steps", "2000", "--step-sleep", "0.1", "--pp", "2",
             "--hang-rank", "3", "--hang-at", "20"], env, run_dir))
        try:
            got = arrivals.wait(lambda c: c.action == "evict", 240)
            if got:
                steps = [decode(m.value) for m in read_topic(settings, "telemetry.train", idle_s=0.3, timeout_s=20)]
                last = max((e.ts for e in steps if e.job == job and e.kind == "step" and e.data.get("rank") == 3),
                           default=None)
                if last is not None:
                    samples.append(got[0] - last)
        finally:
            arrivals.listener.stop()
            for p in reversed(procs):
                p.stop()
    return summary("hang_to_evict", samples, lost=runs - len(samples))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=100, help="samples per fast stage (default 100)")
    p.add_argument("--hang-runs", type=int, default=0, help="full hang runs (each over a minute; default 0)")
    p.add_argument("--bootstrap", help="a Kafka cluster (default: a fresh embedded broker)")
    args = p.parse_args(argv)
    with_xid = importlib.util.find_spec("faultlens.diagnosis.edge.consumer") is not None
    with tempfile.TemporaryDirectory(prefix="bench-remediation-") as tmp, bench_broker(args.bootstrap) as settings:
        work = Path(tmp)
        private, _ = write_key_pair(work / "keys", KEY)
        env = {**os.environ, SIGNING_KEY_ENV: str(private), "FAULTLENS_HOME": str(work / "home"),
               "FAULTLENS_BOOTSTRAP": settings.bootstrap, "FAULTLENS_LOG_LEVEL": "WARNING"}
        results = run_fast_stages(settings, args.runs, work, env, with_xid)
        if not with_xid:
            results.append({"stage": "xid_to_hook", "skipped": "diagnosis.edge.consumer is not built"})
        if args.hang_runs:
            results.append(run_hang(settings, args.hang_runs, work, env))
        for r in results:
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
