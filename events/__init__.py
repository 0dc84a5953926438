"""What travels on the bus and the pure logic about it: the event envelope and its payloads, the
records (diagnoses, commands, actions, fleet), event time and watermarks, signing, topics and
traces. No Kafka here (a contract in pyproject says so): streams/ holds the Kafka machinery.
"""
