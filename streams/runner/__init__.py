"""The consumer-group runner and its parts: poll, decode, hand to a pure handler, produce, commit
(at-least-once), in event-time order, through rebalances (docs/streaming.md).
"""
