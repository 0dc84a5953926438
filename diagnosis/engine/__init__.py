"""The diagnosis engine and its stages: findings in, diagnosis records out (dedup, debounce,
waves), the same on a live stream, a trace and a unit test. Pure: no Kafka (docs/design.md §1).
"""
