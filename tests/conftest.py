"""Shared fixtures: each area's fixtures live in its own module, registered here once so a
module-scoped fixture (a simulated trace, say) is built once however many test files use it."""

pytest_plugins = [
    "tests.kafka_fixtures",
    "tests.simulator.sim_fixtures",
    "tests.collectors.stack_fixtures",
    "tests.file_order",
]

# The example expect files under fixtures/ describe foreign fixtures that are not Parquet traces:
# tests/diagnosis/test_expect_examples.py checks them. The faultlens pytest plugin (entry point)
# would otherwise collect each as a replay test whose trace is missing.
collect_ignore_glob = ["fixtures/*.expect.jsonl"]
