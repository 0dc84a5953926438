"""Shared fixtures. Broker fixtures live in tests/kafka_fixtures.py; each area adds its own module."""

pytest_plugins = ["tests.kafka_fixtures"]
