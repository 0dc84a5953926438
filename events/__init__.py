"""What travels on the bus and the pure logic about it: the event envelope and its payloads, the
records (diagnoses, commands, actions, fleet), event time and watermarks, signing, topics and
traces. No Kafka here (a contract in pyproject says so): streams/ holds the Kafka machinery.
"""

# One name per module (docs/CONTRIBUTING.md, "Layout"): from the repository root this folder is also
# importable by its bare name, which would load a second copy of every module in it (a second enum,
# an exception class that the other copy's `except` misses).
if not __name__.startswith("faultlens."):
    raise ImportError(f"{__name__} is faultlens.{__name__}: import it, or run it with python -m, by that name "
                      "(one name per module: docs/CONTRIBUTING.md, Layout)")
