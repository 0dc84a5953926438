"""Shared fixtures: each area's fixtures live in its own module, registered here once so a
module-scoped fixture (a simulated trace, say) is built once however many test files use it."""

pytest_plugins = [
    "tests.kafka_fixtures",
    "tests.simulator.sim_fixtures",
    "tests.collectors.stack_fixtures",
]

# The example expect files under fixtures/ describe foreign fixtures that are not Parquet traces:
# tests/diagnosis/test_expect_examples.py checks them. The faultlens pytest plugin (entry point)
# would otherwise collect each as a replay test whose trace is missing.
collect_ignore_glob = ["fixtures/*.expect.jsonl"]


def pytest_collection_modifyitems(config, items):
    """Files holding tests marked ``long(seconds)`` are collected first, the longest first (a
    file's seconds are its long tests' together: test_stages' three minute-long cases are one
    three-minute file to the worker that takes it).

    pytest-xdist's ``--dist loadfile`` hands files to its workers in collection order; in path
    order the four-minute live silence test started two thirds of the way through and the suite
    waited on it alone at the end (its makespan, not its work, set the suite's time on CI's 2 cores).
    The seconds only order the files; nothing is asserted of them."""
    def file_of(item) -> str:
        return item.nodeid.partition("::")[0]

    weight: dict[str, float] = {}
    for item in items:
        mark = item.get_closest_marker("long")
        seconds = float(mark.args[0]) if mark is not None and mark.args else 0.0
        weight[file_of(item)] = weight.get(file_of(item), 0.0) + seconds
    items.sort(key=lambda item: -weight[file_of(item)])  # stable: a file's order kept
