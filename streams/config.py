"""Kafka settings from flags, environment and a config file (in that order of precedence).

The config file is TOML (``--config`` or ``FAULTLENS_CONFIG``)::

    [kafka]
    bootstrap = "kafka-1:9093,kafka-2:9093"
    client_id = "faultlens-diagnose"
    security_protocol = "SASL_SSL"
    sasl_mechanism = "SCRAM-SHA-512"
    sasl_username = "faultlens"
    sasl_password_file = "/etc/faultlens/kafka-password"
    ssl_cafile = "/etc/ssl/kafka-ca.pem"
    acks = "all"
    compression = "gzip"
    replication_factor = 3
    client = "confluent"        # or "kafka-python" (the default); needs faultlens[fast]

    [topics."telemetry.gpu"]
    partitions = 48
    "retention.ms" = "86400000"

Every ``[kafka]`` key also reads from ``FAULTLENS_<KEY>`` (``FAULTLENS_BOOTSTRAP``, ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka.coordinator.assignors.range import RangePartitionAssignor

from faultlens.events.topics import TOPICS, TopicSpec


class ConfigError(ValueError):
    """Kafka settings a person gave wrong (a flag, a FAULTLENS_* variable, the --config file): the
    CLI says it in one line, exit 2, instead of a traceback."""


ENV_PREFIX = "FAULTLENS_"

# Against Tansu a group joins in seconds only with a short session timeout (its rebalance waits
# for the session timeout of members that left); real clusters are fine with it too.
DEFAULT_SESSION_TIMEOUT_MS = 6000

# The broker holds a fetch up to this long waiting for data: at kafka-python's 500 ms default every
# hop of diagnose → remediate → hook adds a quarter second on average.
DEFAULT_FETCH_MAX_WAIT_MS = 100

# The Kafka client library every producer and consumer uses (streams/kafka_client.py): kafka-python
# by default; confluent-kafka (librdkafka) is the fast path, an optional extra.
CLIENTS = ("kafka-python", "confluent")
DEFAULT_CLIENT = "kafka-python"


@dataclass
class KafkaSettings:
    bootstrap: str | None = None
    client_id: str = "faultlens"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    sasl_password_file: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    acks: str = "all"
    compression: str | None = None
    replication_factor: int = 1
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS  # consumers: the broker's longest wait for data
    client: str = DEFAULT_CLIENT
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)

    # --- loading ----------------------------------------------------------------------------
    @classmethod
    def load(cls, config_path: str | None = None, overrides: dict[str, Any] | None = None) -> "KafkaSettings":
        settings = cls()
        path = config_path or os.environ.get(ENV_PREFIX + "CONFIG")
        if path:
            settings._apply_file(Path(path))
        settings._apply_env()
        for key, value in (overrides or {}).items():
            if value is not None:
                settings._set(key, value)
        return settings

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "KafkaSettings":
        overrides = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls) if f.name != "topics"}
        return cls.load(getattr(args, "config", None), overrides)

    def _set(self, key: str, value: Any) -> None:
        kinds = {f.name: f.type for f in dataclasses.fields(self)}
        if key not in kinds or key == "topics":
            raise ConfigError(f"unknown Kafka setting {key!r}")
        if key == "client" and value not in CLIENTS:
            raise ConfigError(f"unknown Kafka client {value!r} (one of {', '.join(CLIENTS)})")
        current = getattr(self, key)
        if isinstance(current, int) and not isinstance(current, bool):
            try:
                value = int(value)
            except ValueError:
                raise ConfigError(f"Kafka setting {key} must be a whole number, not {value!r}") from None
        setattr(self, key, value)

    def _apply_file(self, path: Path) -> None:
        try:
            doc = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        for key, value in (doc.get("kafka") or {}).items():
            self._set(key, value)
        for name, conf in (doc.get("topics") or {}).items():
            if name not in TOPICS:
                raise ConfigError(f"config file {path}: unknown topic {name!r} (known: {', '.join(TOPICS)})")
            self.topics[name] = dict(conf)

    def _apply_env(self) -> None:
        for f in dataclasses.fields(self):
            if f.name == "topics":
                continue
            value = os.environ.get(ENV_PREFIX + f.name.upper())
            if value:
                self._set(f.name, value)

    # --- what the clients get ---------------------------------------------------------------
    def password(self) -> str | None:
        if self.sasl_password_file:
            return Path(self.sasl_password_file).read_text().strip()
        return self.sasl_password

    def address(self) -> str:
        """The bootstrap address, once resolved (streams.broker.resolve_bootstrap); ValueError before."""
        if not self.bootstrap:
            raise ValueError("no bootstrap address resolved (see streams.broker.resolve_bootstrap)")
        return self.bootstrap

    def common_kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "bootstrap_servers": self.address().split(","),
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism:
            out["sasl_mechanism"] = self.sasl_mechanism
            out["sasl_plain_username"] = self.sasl_username
            out["sasl_plain_password"] = self.password()
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    def producer_kwargs(self) -> dict[str, Any]:
        acks: Any = self.acks
        if acks in ("0", "1"):
            acks = int(acks)
        out = {**self.common_kwargs(), "acks": acks, "linger_ms": 5, "batch_size": 256 * 1024, "retries": 5}
        if self.compression and self.compression != "none":
            out["compression_type"] = self.compression
        return out

    def consumer_kwargs(self, group: str | None) -> dict[str, Any]:
        return {
            **self.common_kwargs(),
            "group_id": group,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": max(500, self.session_timeout_ms // 4),
            "max_poll_records": 2000,
            "fetch_max_wait_ms": self.fetch_max_wait_ms,
            # Partition p of every subscribed topic to one member: the node stage needs a node's
            # events on one member (co-partitioned topics, events/topics.py). kafka-python's
            # default list starts with it too; named, a change of default cannot split a node.
            "partition_assignment_strategy": (RangePartitionAssignor,),
        }

    def topic_spec(self, name: str) -> TopicSpec:
        base = TOPICS[name]
        conf = dict(base.config)
        partitions = base.partitions
        for key, value in self.topics.get(name, {}).items():
            if key == "partitions":
                partitions = int(value)
            else:
                conf[key] = str(value)
        return dataclasses.replace(base, partitions=partitions, config=conf)


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """The Kafka flags every command that talks to a broker takes."""
    g = parser.add_argument_group("Kafka (flags override FAULTLENS_* environment, which overrides --config)")
    g.add_argument("--bootstrap", help="HOST:PORT[,HOST:PORT...] of a Kafka cluster (default: FAULTLENS_BOOTSTRAP, the config file, then the embedded broker `faultlens up`, `demo` or `broker` registered in $FAULTLENS_HOME/broker.json)")
    g.add_argument("--config", help="TOML file with [kafka] settings and per-topic [topics.NAME] overrides")
    g.add_argument("--client-id", dest="client_id", help="Kafka client id")
    g.add_argument("--security-protocol", dest="security_protocol", choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
    g.add_argument("--sasl-mechanism", dest="sasl_mechanism", help="PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, ...")
    g.add_argument("--sasl-username", dest="sasl_username")
    g.add_argument("--sasl-password-file", dest="sasl_password_file", help="file holding the SASL password")
    g.add_argument("--ssl-cafile", dest="ssl_cafile")
    g.add_argument("--ssl-certfile", dest="ssl_certfile")
    g.add_argument("--ssl-keyfile", dest="ssl_keyfile")
    g.add_argument("--acks", choices=["0", "1", "all"], help="producer acks (default all)")
    g.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    g.add_argument("--client", dest="client", choices=CLIENTS,
                   help=f"Kafka client library (default {DEFAULT_CLIENT}; confluent needs faultlens[fast]; "
                        "env FAULTLENS_CLIENT)")
