"""Shared fixtures: each area's fixtures live in its own module, registered here once so a
module-scoped fixture (a simulated trace, say) is built once however many test files use it."""

import os

# One intra-op thread for torch, here and in every process a test starts (the env is inherited): the suite
# keeps both cores busy with its xdist workers, and torch's OpenMP threads then spin waiting for a core.
# The trainer_hooks torch tests took 6.8-7.3 CPU-s with it, 10.6-12.6 without, on the same 2-core
# machine (issue 47). setdefault: a run that sets its own count keeps it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest_plugins = [
    "tests.bytecode_cache",
    "tests.kafka_fixtures",
    "tests.simulator.sim_fixtures",
    "tests.collectors.stack_fixtures",
    "tests.remediation.slurm_fixture",
    "tests.file_order",
    "tests.leak_check",
]

# The example expect files under fixtures/ describe foreign fixtures that are not Parquet traces:
# tests/diagnosis/test_expect_examples.py checks them. The faultlens pytest plugin (entry point)
# would otherwise collect each as a replay test whose trace is missing.
collect_ignore_glob = ["fixtures/*.expect.jsonl"]
