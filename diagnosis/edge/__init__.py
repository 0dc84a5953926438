"""The Kafka edge of diagnosis: the thin consumers that feed the engine's stages from the bus and
write what they decide. The only room of diagnosis/ that may reach Kafka or the runner.
"""
