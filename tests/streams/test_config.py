import argparse

import pytest

from faultlens.streams.config import KafkaSettings, add_kafka_arguments


def parse(argv):
    p = argparse.ArgumentParser()
    add_kafka_arguments(p)
    return p.parse_args(argv)


def test_flags_beat_environment_beat_file(tmp_path, monkeypatch):
    cfg = tmp_path / "faultlens.toml"
    cfg.write_text(
        '[kafka]\nbootstrap = "file:1"\nclient_id = "from-file"\nacks = "1"\ncompression = "gzip"\n'
        '[topics."telemetry.gpu"]\npartitions = 48\n"retention.ms" = "3600000"\n'
    )
    monkeypatch.setenv("FAULTLENS_CLIENT_ID", "from-env")
    monkeypatch.setenv("FAULTLENS_BOOTSTRAP", "env:2")
    s = KafkaSettings.from_args(parse(["--config", str(cfg), "--bootstrap", "flag:3"]))
    assert s.bootstrap == "flag:3"
    assert s.client_id == "from-env"
    assert s.acks == "1" and s.compression == "gzip"
    spec = s.topic_spec("telemetry.gpu")
    assert spec.partitions == 48 and spec.config["retention.ms"] == "3600000"
    assert s.topic_spec("jobs").config["cleanup.policy"] == "compact"
    kw = s.producer_kwargs()
    assert kw["acks"] == 1 and kw["compression_type"] == "gzip" and kw["bootstrap_servers"] == ["flag:3"]


def test_sasl_tls_settings_reach_the_client(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    s = KafkaSettings.from_args(parse([
        "--bootstrap", "a:9093,b:9093", "--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512",
        "--sasl-username", "fl", "--sasl-password-file", str(pw), "--ssl-cafile", "/etc/ca.pem",
    ]))
    kw = s.consumer_kwargs("g")
    assert kw["bootstrap_servers"] == ["a:9093", "b:9093"]
    assert kw["security_protocol"] == "SASL_SSL"
    assert kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kw["sasl_plain_username"] == "fl" and kw["sasl_plain_password"] == "s3cret"
    assert kw["ssl_cafile"] == "/etc/ca.pem"
    assert kw["enable_auto_commit"] is False
    assert kw["session_timeout_ms"] == 6000


@pytest.mark.parametrize(
    "text,message",
    [("[kafka]\nnope = 1\n", "unknown Kafka setting"), ("[topics.bogus]\npartitions = 1\n", "unknown topic"),
     ("not = [toml", "not valid TOML")],
)
def test_bad_config_file_gives_a_clear_error(tmp_path, text, message):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    with pytest.raises(ValueError, match=message):
        KafkaSettings.load(str(cfg))


def test_missing_config_file():
    with pytest.raises(ValueError, match="does not exist"):
        KafkaSettings.load("/nonexistent/faultlens.toml")


def test_client_comes_from_flag_then_environment_then_file(tmp_path, monkeypatch):
    cfg = tmp_path / "faultlens.toml"
    cfg.write_text('[kafka]\nclient = "confluent"\n')
    assert KafkaSettings.from_args(parse([])).client == "kafka-python"  # the default
    assert KafkaSettings.from_args(parse(["--config", str(cfg)])).client == "confluent"
    monkeypatch.setenv("FAULTLENS_CLIENT", "kafka-python")
    assert KafkaSettings.from_args(parse(["--config", str(cfg)])).client == "kafka-python"
    assert KafkaSettings.from_args(parse(["--client", "confluent"])).client == "confluent"
    with pytest.raises(SystemExit):
        parse(["--client", "librdkafka"])
    monkeypatch.setenv("FAULTLENS_CLIENT", "librdkafka")
    with pytest.raises(ValueError, match="unknown Kafka client 'librdkafka'"):
        KafkaSettings.from_args(parse([]))


def test_every_command_that_talks_to_kafka_takes_client():
    from faultlens.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    with_kafka = {name for name, sub in commands.items()
                  if any("--bootstrap" in a.option_strings for a in sub._actions)}
    assert {"diagnose", "remediate", "history", "collect", "replay", "record", "simulate", "up", "demo"} <= with_kafka
    for name in with_kafka:
        client = next((a for a in commands[name]._actions if "--client" in a.option_strings), None)
        assert client is not None and list(client.choices) == ["kafka-python", "confluent"], name


def test_confluent_settings_say_the_same_as_kafka_python(tmp_path):
    from faultlens.streams.kafka_client import confluent_config

    pw = tmp_path / "pw"
    pw.write_text("s3cret\n")
    s = KafkaSettings(bootstrap="k1:9093,k2:9093", client="confluent", security_protocol="SASL_SSL",
                      sasl_mechanism="SCRAM-SHA-512", sasl_username="fl", sasl_password_file=str(pw),
                      ssl_cafile="/etc/ca.pem", client_id="faultlens-diagnose")
    conf = confluent_config(s)
    assert conf["bootstrap.servers"] == "k1:9093,k2:9093" and conf["client.id"] == "faultlens-diagnose"
    assert conf["security.protocol"] == "sasl_ssl" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.username"] == "fl" and conf["sasl.password"] == "s3cret"
    assert conf["ssl.ca.location"] == "/etc/ca.pem"


def test_settings_librdkafka_refuses_are_a_clear_error():
    pytest.importorskip("confluent_kafka")
    from faultlens.streams.kafka_client import open_consumer
    from faultlens.streams.producer import Producer

    bad = KafkaSettings(bootstrap="127.0.0.1:1", client="confluent", security_protocol="SASL_PLAINTEXT",
                        sasl_mechanism="BOGUS")
    with pytest.raises(ValueError, match="Unsupported SASL mechanism: BOGUS"):
        Producer(bad)
    with pytest.raises(ValueError, match="Unsupported SASL mechanism: BOGUS"):
        open_consumer(bad, "g")


def test_the_deployed_config_keeps_the_telemetry_topics_co_partitioned(tmp_path):
    """deploy/k8s/configmap.yaml once raised telemetry.gpu alone to 48 partitions: its node stage
    would have split nodes between members (now it refuses to start)."""
    import textwrap
    from pathlib import Path

    from faultlens.events.topics import TELEMETRY_TOPICS, copartition_problem

    text = (Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "configmap.yaml").read_text()
    embedded = textwrap.dedent(text.split("faultlens.toml: |\n", 1)[1])
    config = tmp_path / "faultlens.toml"
    config.write_text(embedded)
    settings = KafkaSettings.load(str(config))
    assert copartition_problem({t: settings.topic_spec(t).partitions for t in TELEMETRY_TOPICS}) is None
