from pathlib import Path

from faultlens.events.topics import TOPICS

DOC = Path(__file__).resolve().parents[2] / "docs" / "kafka.md"


def test_kafka_doc_lists_every_topic_with_its_defaults():
    rows = {line.split("|")[1].strip(" `"): [c.strip() for c in line.split("|")[1:-1]]
            for line in DOC.read_text().splitlines() if line.startswith("| `")}
    for name, spec in TOPICS.items():
        assert name in rows, f"{name} missing from docs/kafka.md"
        _, key, partitions, cleanup, *_ = rows[name]
        assert key == spec.key and int(partitions) == spec.partitions
        assert cleanup == spec.config.get("cleanup.policy", "delete")
