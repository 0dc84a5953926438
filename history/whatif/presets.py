"""Published parameter sets: ByteRobust (SOSP '25) and Llama 3 (Meta, 2024).

Where a paper gives a figure it is quoted beside the value; where it is silent the value is what an
SRE running a 10,000-GPU job would expect, marked ``# choice:`` (docs/ettr.md lists them all).

Rates follow Meta's series model (Kokolis et al., "Revisiting Reliability in Large-Scale ML Research
Clusters", 2025: a job's failure rate is its nodes times a per-node rate; 6.50 and 2.34 failures per
1,000 node-days on their two clusters).
"""

from __future__ import annotations

import functools
from dataclasses import replace

from faultlens.history.whatif.model import FaultClass, Recovery, Scenario
from faultlens.history.whatif.provenance import Input, Kind, mark

# Llama 3 (Meta, "The Llama 3 Herd of Models", 2024, §3.3.4 and Table 5): 16,384 H100 (2,048 nodes)
# for 54 days, 466 interruptions: 419 unexpected, 47 planned; > 90 % effective training time.
LLAMA3_NODE_DAYS = 2048 * 54
# Table 5's unexpected interruptions, folded into faultlens classes (docs/design.md §9).
LLAMA3_COUNTS = {
    "gpu_lost": 148 + 17,          # faulty GPU, GPU system processor
    "gpu_memory": 72 + 19,         # GPU HBM3, GPU SRAM
    "user_code": 54 + 2,           # software bug, dependency
    "nic": 35 + 7,                 # network switch / cable, NIC
    "kernel": 32 + 3 + 3 + 2 + 2 + 2 + 2,  # host maintenance, SSD, PSU, chassis, IO board, CPU, memory
    "job_hang": 7,                 # NCCL watchdog timeouts
    "gpu_thermal": 6,              # GPU thermal interface + sensor
    "nan_loss": 6,                 # silent data corruption
}
LLAMA3_PLANNED = 47            # automated maintenance (firmware, config): a restart, nothing lost

# ByteRobust's census over 778,135 jobs (Table 1, docs/design.md §3), shares of incidents.
BYTEROBUST_CENSUS = {
    "cuda_error": 36.1, "host_oom": 11.0 + 10.1, "job_hang": 9.9, "storage": 5.0, "nic": 2.9,
    "fail_slow": 0.8, "nan_loss": 0.3, "unknown": 100 - 93.4,
}
BYTEROBUST_MANUAL = 17.3       # manual restarts: code / config changes, recovered by hot update
# Meta counted interruptions over the job's wall-clock days; the model's faults arrive while the job
# runs. ``running_factor`` converts once: the factor that makes the Llama 3 job itself expect 466.
LLAMA3_INTERRUPTIONS = sum(LLAMA3_COUNTS.values()) + LLAMA3_PLANNED

# Framework timeouts (ByteRobust §2: PyTorch's ~10 min collective timeout, 30-60 min for NCCL hangs).
TORCH_TIMEOUT_S = 600.0
NCCL_HANG_TIMEOUT_S = 1800.0
# choice: without a tool that names the culprit, someone bisects by hand (NCCL tests, reruns).
MANUAL_LOCALISE_S = 1800.0
# choice: a fail-slow node has no timeout; someone notices the MFU curve within a few hours.
NOTICED_BY_HAND_S = 4 * 3600.0


def _scaled(s: Scenario, k: float) -> Scenario:
    return replace(s, faults=tuple(replace(f, rate=f.rate * k) for f in s.faults))


@functools.cache
def running_factor() -> float:
    """Per wall-clock node-day -> per running node-day, for Llama 3's rates: the factor k with which
    the Llama 3 job (16,384 GPUs, 54 days) expects the 466 interruptions Meta counted. The one
    conversion of a source's unit; every preset's rate is the source's count times k."""
    from faultlens.history.whatif.closed_form import project

    wall = _llama3_wall()
    k = 1.0
    for _ in range(30):
        expected = project(_scaled(wall, k)).faults_expected
        k_new = k * LLAMA3_INTERRUPTIONS / expected
        if abs(k_new - k) < 1e-9 * k:
            return k_new
        k = k_new
    return k


# choice: ByteRobust gives no per-node rate for its 9,600-GPU job; we take Llama 3's measured
# unexpected rate on H100s (419 / 110,592 wall node-days = 3.79 per 1,000, between Meta's 2.34 and
# 6.50; per running node-day, times running_factor) and split it by the census.
def unexpected_rate() -> float:
    return sum(LLAMA3_COUNTS.values()) / LLAMA3_NODE_DAYS * running_factor()


def _census_rate(share: float) -> float:
    return unexpected_rate() * share / (100.0 - BYTEROBUST_MANUAL)


def _marked(s: Scenario, marks: dict[str, Input]) -> Scenario:
    for key, inp in marks.items():
        s = mark(s, key, inp)
    return s


PUB, ASSUMED = Kind.PUBLISHED, Kind.ASSUMED
BYTEROBUST_PAPER = "ByteRobust (SOSP '25)"
LLAMA3_PAPER = "Llama 3 (Meta 2024) Table 5"
KOKOLIS = "Kokolis et al. 2025"
# The inputs nobody published carry a range, and so do published ranges; the band runs over them.
BYTEROBUST_INPUTS = {
    "checkpoint_stall_s": Input(PUB, f"{BYTEROBUST_PAPER}: in-memory checkpoint 0.01-0.04 s", 0.01, 0.04),
    "recovery.requeue_s": Input(PUB, f"{BYTEROBUST_PAPER}: requeue 454-768 s", 454.0, 768.0),
    "recovery.standby_s": Input(ASSUMED, f"{BYTEROBUST_PAPER} says warm standby is up to 10.87x faster than a "
                                "requeue; as an average that is the best case: 3x-10.87x", 611 / 10.87, 611 / 3),
    "recovery.restart_s": Input(ASSUMED, "an in-place restart as fast as a warm standby, 3x-10.87x", 611 / 10.87,
                                611 / 3),
    "recovery.hot_update_s": Input(PUB, f"{BYTEROBUST_PAPER}: hot update 46-65 s", 46.0, 65.0),
    "faults.cuda_error.localise_s": Input(ASSUMED, "stop-time diagnosis: 1-15 min", 60.0, 900.0),
    "faults.unknown.localise_s": Input(ASSUMED, "stop-time diagnosis: 1-15 min", 60.0, 900.0),
    "faults.cuda_error.detect_s": Input(PUB, f"{BYTEROBUST_PAPER}: a lost GPU in 10 s"),
    "faults.nic.detect_s": Input(PUB, f"{BYTEROBUST_PAPER}: NIC 30 s"),
    "faults.cuda_error.evict_share": Input(PUB, f"{BYTEROBUST_PAPER}: eviction 32.5 % of resolutions vs "
                                           "reattempt 22.7 % + rollback 9.2 %"),
    "faults.host_oom.localise_s": Input(ASSUMED, "seen at once on the host", 30.0, 300.0),
    "faults.host_oom.evict_share": Input(ASSUMED, "mostly a restart in place", 0.1, 0.5),
    "faults.job_hang.detect_s": Input(ASSUMED, "a few step times without progress", 120.0, 600.0),
    "faults.job_hang.localise_s": Input(ASSUMED, "stack aggregation", 60.0, 300.0),
    "faults.job_hang.over_evict": Input(ASSUMED, "a PP group of 2-4 machines blamed", 1.0, 3.0),
    "faults.storage.localise_s": Input(ASSUMED, "a disk or filesystem error names its node", 10.0, 120.0),
    "faults.fail_slow.detect_s": Input(ASSUMED, "MFU decline seen in 5-30 min", 300.0, 1800.0),
    "faults.fail_slow.localise_s": Input(ASSUMED, "rounds of stack aggregation", 100.0, 900.0),
    "faults.fail_slow.slowdown": Input(ASSUMED, "a slow machine costs 10-50 % of throughput", 0.1, 0.5),
    "faults.nan_loss.detect_s": Input(ASSUMED, "NaN found within minutes", 30.0, 300.0),
    "faults.nan_loss.localise_s": Input(ASSUMED, "rollback and rerun to the bad step", 300.0, 1800.0),
    "faults.unknown.detect_s": Input(ASSUMED, "noticed like a CUDA error or later", 10.0, 300.0),
    "spare_return_days": Input(ASSUMED, "an evicted machine repaired or replaced in a day", 0.5, 3.0),
}
BYTEROBUST_INPUTS.update({
    "gpus_per_node": Input(PUB, f"{BYTEROBUST_PAPER}: 8-GPU machines"),
    "gpus": Input(PUB, f"{BYTEROBUST_PAPER}: a 9,600-GPU job"), "days": Input(PUB, f"{BYTEROBUST_PAPER}: three months"),
    "faults.host_oom.detect_s": Input(ASSUMED, "seen at once on the host", 2.0, 60.0),
    "faults.storage.detect_s": Input(ASSUMED, "a kernel-log line", 2.0, 60.0),
    "faults.nic.localise_s": Input(ASSUMED, "the NIC names its node", 0.0, 60.0),
    "faults.storage.evict_share": Input(ASSUMED, "a failing local disk evicts its node; an NFS outage does not",
                                        0.5, 1.0),
    "faults.unknown.evict_share": Input(ASSUMED, "like a CUDA error", 0.25, 0.75),
    "faults.fail_slow.over_evict": Input(ASSUMED, "the degrader's PP group", 0.0, 3.0),
})
for _name in ("cuda_error", "host_oom", "job_hang", "storage", "nic", "fail_slow", "nan_loss", "unknown", "planned"):
    BYTEROBUST_INPUTS[f"faults.{_name}.rate"] = Input(
        PUB, f"{LLAMA3_PAPER}'s 419 unexpected per 110,592 wall node-days (per running node-day), split by "
        f"{BYTEROBUST_PAPER}'s census of 778,135 jobs")


def byterobust(gpus: int = 9600, days: float = 90.0) -> Scenario:
    """ByteRobust's 9,600-GPU, three-month job: 97 % ETTR (abstract, §8)."""
    c = _census_rate
    faults = (
        # ByteRobust detects a kernel fault in 2 s, a lost GPU in 10 s; a CUDA error ends the process.
        # choice: stop-time diagnosis (diagnostics on every machine, then reattempt / rollback /
        # dual-phase replay, the reproduction here) averages 6 min; half end in an eviction (eviction 32.5 % vs reattempt
        # 22.7 % + rollback 9.2 % of resolutions).
        FaultClass("cuda_error", c(36.1), detect_s=10, localise_s=360, evict_share=0.5,
                   stop_time=True, timeout_s=TORCH_TIMEOUT_S, manual_localise_s=MANUAL_LOCALISE_S),
        # CPU overload and OOM: seen at once on the host; mostly a restart in place. choice.
        FaultClass("host_oom", c(21.1), detect_s=10, localise_s=60, evict_share=0.2,
                   timeout_s=TORCH_TIMEOUT_S, manual_localise_s=600),
        # choice: a hang is called after a few step times without progress (5 min), the stack
        # aggregation takes 2 min, and the blamed PP group of 4 machines holds one culprit.
        FaultClass("job_hang", c(9.9), detect_s=300, localise_s=120, evict_share=1.0, over_evict=3.0,
                   timeout_s=NCCL_HANG_TIMEOUT_S, manual_localise_s=MANUAL_LOCALISE_S),
        FaultClass("storage", c(5.0), detect_s=10, localise_s=30, evict_share=1.0,
                   timeout_s=TORCH_TIMEOUT_S, manual_localise_s=600),
        # ByteRobust: NIC 30 s (switch 60 s).
        FaultClass("nic", c(2.9), detect_s=30, localise_s=0, evict_share=1.0,
                   timeout_s=TORCH_TIMEOUT_S, manual_localise_s=MANUAL_LOCALISE_S),
        # choice: MFU decline seen in 10 min, 5 rounds of stack aggregation, 30 % slower meanwhile;
        # the trainer checkpoints before the eviction, so no work is lost.
        FaultClass("fail_slow", c(0.8), detect_s=600, localise_s=300, evict_share=1.0, over_evict=3.0,
                   slowdown=0.3, loses_work=False, timeout_s=NOTICED_BY_HAND_S, manual_localise_s=7200),
        # choice: NaN found within a minute; rollback and rerun to the bad step take 10 min.
        FaultClass("nan_loss", c(0.3), detect_s=60, localise_s=600, evict_share=0.0,
                   stop_time=True, timeout_s=NOTICED_BY_HAND_S, manual_localise_s=3600),
        FaultClass("unknown", c(100 - 93.4), detect_s=60, localise_s=360, evict_share=0.5,
                   stop_time=True, timeout_s=TORCH_TIMEOUT_S, manual_localise_s=MANUAL_LOCALISE_S),
        FaultClass("planned", c(BYTEROBUST_MANUAL), detect_s=0, localise_s=0, evict_share=0.0,
                   loses_work=False, planned=True),
    )
    # ByteRobust: requeue 454-768 s, warm standby 10.87x faster, hot update 46-65 s; checkpoint stall
    # 0.01-0.04 s (in-memory, every few steps).
    recovery = Recovery(standby_s=611 / 10.87, requeue_s=611, restart_s=611 / 10.87, hot_update_s=55)
    return _timeouts(_marked(Scenario(gpus=gpus, days=days, faults=faults, checkpoint_stall_s=0.03,
                                      recovery=recovery, name="byterobust"), BYTEROBUST_INPUTS))


LLAMA3_INPUTS = {
    "faults.job_hang.detect_s": Input(PUB, "PyTorch's NCCL watchdog, 10 min by default"),
    "faults.user_code.localise_s": Input(ASSUMED, "a traceback names the code", 120.0, 900.0),
    "faults.job_hang.localise_s": Input(ASSUMED, "the flight recorder's dumps", 120.0, 900.0),
    "faults.nan_loss.detect_s": Input(ASSUMED, "silent data corruption seen in the loss", 60.0, 1800.0),
    "faults.nan_loss.localise_s": Input(ASSUMED, "rollback and rerun", 600.0, 3600.0),
    "checkpoint_stall_s": Input(ASSUMED, "asynchronous save, only the copy out of GPU memory blocks", 10.0, 60.0),
    "spares": Input(ASSUMED, "no warm standby published: every path a restart"),
}
LLAMA3_INPUTS.update({
    "gpus_per_node": Input(PUB, f"{LLAMA3_PAPER}: 8 H100 per server"),
    "gpus": Input(PUB, f"{LLAMA3_PAPER}: 16,384 H100"), "days": Input(PUB, f"{LLAMA3_PAPER}: 54 days"),
    "faults.user_code.detect_s": Input(ASSUMED, "the process exits with a traceback", 10.0, 300.0),
    "spare_return_days": Input(ASSUMED, "no spares: unused", 0.5, 3.0),
})
for _path in ("standby_s", "requeue_s", "restart_s", "hot_update_s"):
    LLAMA3_INPUTS[f"recovery.{_path}"] = Input(PUB, f"{KOKOLIS}: restart overhead 5-20 min (central: the low end, "
                                               "Llama 3 says startup was cut)", 300.0, 1200.0)
for _name in ("gpu_lost", "gpu_memory", "nic", "kernel", "gpu_thermal"):
    LLAMA3_INPUTS[f"faults.{_name}.detect_s"] = Input(ASSUMED, "NCCLX / flight recorder: about a minute", 30.0, 300.0)
    LLAMA3_INPUTS[f"faults.{_name}.localise_s"] = Input(ASSUMED, "the culprit in about two minutes", 60.0, 600.0)
for _name in (*LLAMA3_COUNTS, "planned"):
    LLAMA3_INPUTS[f"faults.{_name}.rate"] = Input(
        PUB, f"{LLAMA3_PAPER}: counts per 110,592 wall node-days, converted once to running node-days")


def llama3(gpus: int = 16384, days: float = 54.0) -> Scenario:
    """Llama 3 405B pre-training: > 90 % effective training time."""
    return _scaled(_llama3_wall(gpus, days), running_factor())


def _llama3_wall(gpus: int = 16384, days: float = 54.0) -> Scenario:
    """The Llama 3 job with its rates in Meta's unit: interruptions per wall-clock node-day."""
    def rate(name: str) -> float:
        return LLAMA3_COUNTS[name] / LLAMA3_NODE_DAYS

    hardware = functools.partial(FaultClass, detect_s=60, localise_s=120, evict_share=1.0, timeout_s=TORCH_TIMEOUT_S,
                                 manual_localise_s=MANUAL_LOCALISE_S)
    # choice: Meta's tooling (NCCLX, the flight recorder) finds a crashed GPU or host in about a
    # minute and the culprit in two; a hang waits for the NCCL watchdog.
    faults = (
        hardware("gpu_lost", rate("gpu_lost")),
        hardware("gpu_memory", rate("gpu_memory")),
        hardware("nic", rate("nic")),
        hardware("kernel", rate("kernel")),
        hardware("gpu_thermal", rate("gpu_thermal")),
        FaultClass("user_code", rate("user_code"), detect_s=60, localise_s=300, evict_share=0.0,
                   timeout_s=TORCH_TIMEOUT_S, manual_localise_s=MANUAL_LOCALISE_S),
        FaultClass("job_hang", rate("job_hang"), detect_s=TORCH_TIMEOUT_S, localise_s=300, evict_share=1.0,
                   timeout_s=NCCL_HANG_TIMEOUT_S, manual_localise_s=MANUAL_LOCALISE_S),
        FaultClass("nan_loss", rate("nan_loss"), detect_s=300, localise_s=1800, evict_share=1.0,
                   stop_time=True, timeout_s=NOTICED_BY_HAND_S, manual_localise_s=3 * 3600),
        FaultClass("planned", LLAMA3_PLANNED / LLAMA3_NODE_DAYS, detect_s=0, evict_share=0.0,
                   loses_work=False, planned=True),
    )
    # Meta (Kokolis et al.): restart overhead 5-20 min. choice: 5 min, the low end, since Llama 3
    # says startup and checkpoint times were cut for this run; no warm standby published, so every
    # path costs a restart. choice: a 10 s checkpoint stall (asynchronous save; only the copy out of
    # GPU memory blocks), the interval then Young / Daly's optimum.
    restart = 300.0
    recovery = Recovery(standby_s=restart, requeue_s=restart, restart_s=restart, hot_update_s=restart)
    return _timeouts(_marked(Scenario(gpus=gpus, days=days, faults=faults, checkpoint_stall_s=10.0,
                                      recovery=recovery, spares=0, name="llama3"), LLAMA3_INPUTS))


def _timeouts(s: Scenario) -> Scenario:
    """What the framework's timeout alone gives (the `timeout_only` comparison, not the projection)."""
    for f in s.faults:
        if f.planned:
            continue
        if f.timeout_s == NOTICED_BY_HAND_S:
            s = mark(s, f"faults.{f.name}.timeout_s", Input(ASSUMED, "noticed by hand on the MFU curve", 3600.0,
                                                            8 * 3600.0))
        else:
            s = mark(s, f"faults.{f.name}.timeout_s", Input(PUB, "ByteRobust §2: PyTorch's ~10 min collective "
                                                            "timeout, 30-60 min for NCCL hangs"))
        s = mark(s, f"faults.{f.name}.manual_localise_s", Input(
            ASSUMED, "a culprit found by hand", min(600.0, f.manual_localise_s), max(7200.0, f.manual_localise_s)))
    return s


# The count a source gives for its own job, for the command to print beside the expected count.
SOURCE_COUNTS = {"llama3": (16384, 54.0, LLAMA3_INTERRUPTIONS, "interruptions counted by Meta")}


PRESETS = {"byterobust": byterobust, "llama3": llama3}
