"""Streaming layer: event contract, topics, Kafka producer and consumer-group runner, embedded broker, traces."""
