"""Shared fixtures: each area's fixtures live in its own module, registered here once so a
module-scoped fixture (a simulated trace, say) is built once however many test files use it."""

pytest_plugins = [
    "tests.kafka_fixtures",
    "tests.simulator.sim_fixtures",
    "tests.collectors.stack_fixtures",
]
