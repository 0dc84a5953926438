"""What a user's script sees of a broker outage: only the hook's own lines (docs/integrations.md, "When
the broker is away"; trainer_hooks/outbox_voice.py), while a kafka-python client of the user's own in
the same process still logs its errors.

Integration: a broker of this test's own killed with SIGKILL and started again (the session's broker
serves every other test), logging as ``logging.basicConfig(level=WARNING)`` sets it, the kafka
loggers at their default level. Unit: the filter's rules on hand-made records.
"""

from __future__ import annotations

import logging
import threading
import uuid

import kafka
import pytest

from faultlens.streams.admin import ensure_topics
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks import outbox_voice
from faultlens.trainer_hooks.hook import TrainerHook
from faultlens.trainer_hooks.outbox_voice import OutageVoice, client_threads, quiet_close
from tests.helpers.own_broker import own_broker
from tests.progress import wait_until
from tests.trainer_hooks.callback_script import KEY

STALL_S = 60.0
HOOK_LINES = ("spooling up to", "broker back after")


@pytest.fixture
def broker(tmp_path):
    with own_broker(tmp_path) as b:  # this module kills its broker: one of its own
        yield b


class Steps:
    """A training loop on a thread of its own, stepping until stopped; the test watches its count."""

    def __init__(self, hook: TrainerHook):
        self.hook, self.count, self.stop = hook, 0, threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="user-training-loop", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.wait(0.02):
                self.hook.step(loss=1.0)
                self.count += 1
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            self.errors.append(exc)

    def more(self, n: int, what: str) -> None:
        target = self.count + n
        wait_until(lambda: self.count >= target or self.errors, progress=lambda: self.count, stall_s=STALL_S, what=what)
        assert not self.errors, self.errors


def user_consumer(bootstrap: str) -> kafka.KafkaConsumer:
    """The user's own client: connected (a partition assigned and read once) before the broker dies."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, client_id="users-own-consumer", enable_auto_commit=False)
    consumer.assign([kafka.TopicPartition("telemetry.train", 0)])
    consumer.poll(timeout_ms=200)
    return consumer


@pytest.mark.broker
@pytest.mark.long(40)
def test_a_broker_outage_speaks_only_the_hooks_lines_and_a_users_own_client_still_logs(broker, tmp_path, caplog):
    caplog.set_level(logging.WARNING)  # what logging.basicConfig(level=WARNING) leaves
    caplog.set_level(logging.NOTSET, logger="kafka")  # kafka's loggers as a user's script has them
    settings = KafkaSettings(bootstrap=broker.bootstrap, client_id=f"trainer-{uuid.uuid4().hex[:6]}")
    hook = TrainerHook(
        job="voice", rank=0, node="n000", settings=settings, keys=KEY.verify_keys(), state_dir=tmp_path, flight_recorder=False
    )
    outbox, voice = hook.outbox, hook.voice
    assert outbox is not None and voice is not None and hook.wait_ready()
    steps = Steps(hook)
    theirs = user_consumer(broker.bootstrap)
    users = client_threads("users-own-consumer")

    def polled() -> int:
        theirs.poll(timeout_ms=100)  # a user's loop keeps reading through the outage
        return len(caplog.records)

    try:
        steps.more(20, "training with the broker up")
        assert outbox.flush(STALL_S)
        caplog.clear()
        broker.proc.kill()
        broker.proc.wait()
        broker.proc = None
        wait_until(lambda: outbox.down, progress=lambda: outbox.pending, stall_s=STALL_S, what="the hook to find its broker gone")
        # The user's own client says the broker is gone, as it did before the hook was there.
        wait_until(
            lambda: any(r.threadName in users and r.levelno >= logging.ERROR for r in caplog.records),
            progress=polled,
            stall_s=STALL_S,
            what="the user's own consumer to log the lost broker",
        )
        steps.more(20, "training with no broker")
        broker.start()
        ensure_topics(settings)
        steps.more(20, "training with the broker back")
        wait_until(
            lambda: not outbox.down and outbox.flush(1.0),
            progress=lambda: (outbox.pending, outbox.delivered),
            stall_s=STALL_S,
            what="the spool to be delivered",
        )
    finally:
        steps.stop.set()
        steps.thread.join(STALL_S)
        hook.close()
        theirs.close()

    seen = [(r.name, r.threadName, r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    hooks = [m for name, _, _, m in seen if name == "faultlens.trainer_hooks.outbox"]
    others = [s for s in seen if s[0] != "faultlens.trainer_hooks.outbox" and s[1] not in users]
    assert others == [], others  # nothing from the hook's clients, nor a delivery failure of a spooled event
    assert [sum(word in m for m in hooks) for word in HOOK_LINES] == [1, 1], hooks
    assert len(hooks) == 2, hooks
    assert voice.demoted > 0  # the hook's clients did speak: at DEBUG
    assert outbox.outages == 1 and outbox.dropped == 0


def record(thread: str, level: int = logging.ERROR, name: str = "kafka.cluster", msg: str = "Metadata refresh: failed"):
    r = logging.LogRecord(name, level, __file__, 1, msg, None, None)
    r.threadName = thread
    return r


def test_the_hooks_clients_are_demoted_only_while_the_broker_is_lost_and_a_users_never(caplog):
    down = [False]
    voice = OutageVoice(client_threads("trainer-j-0", "faultlens-commands"), None, lambda: down[0])
    caplog.set_level(logging.WARNING, logger="kafka.cluster")
    assert voice.filter(r := record("kafka-io-trainer-j-0")) and r.levelno == logging.ERROR  # not known lost: kept
    down[0] = True
    assert not voice.filter(record("kafka-io-trainer-j-0"))  # DEBUG, and kafka's logger is not enabled for DEBUG
    assert not voice.filter(record("trainer-j-0-network-thread", logging.WARNING))
    assert not voice.filter(record("faultlens-commands", logging.WARNING, "faultlens.streams.command_listener"))
    assert voice.filter(r := record("kafka-io-users-own-consumer")) and r.levelno == logging.ERROR  # the user's
    assert voice.filter(r := record("kafka-io-trainer-j-0", logging.INFO)) and r.levelno == logging.INFO
    caplog.set_level(logging.DEBUG, logger="kafka.cluster")
    assert voice.filter(r := record("kafka-io-trainer-j-0")) and r.levelname == "DEBUG"  # shown to who asks for DEBUG
    assert voice.demoted == 4


def test_an_owner_is_told_once_an_outage_when_its_first_line_is_demoted(caplog, monkeypatch):
    told: list[float] = []
    down = [True]
    now = [1000.0]
    monkeypatch.setattr(outbox_voice.time, "monotonic", lambda: now[0])
    voice = OutageVoice(client_threads("launcher"), None, lambda: down[0], on_lost=lambda: told.append(now[0]))
    caplog.set_level(logging.WARNING, logger="kafka.cluster")
    for _ in range(5):  # the burst of one outage
        assert not voice.filter(record("kafka-io-launcher"))
        now[0] += 1.0
    assert told == [1000.0]
    down[0] = False
    now[0] += outbox_voice.SETTLE_S  # back, and settled: the next loss is another outage
    assert voice.filter(record("kafka-io-launcher"))
    down[0] = True
    assert not voice.filter(record("kafka-io-launcher"))
    assert told == [1000.0, now[0]]
    assert voice.filter(record("kafka-io-users-own-consumer")) and len(told) == 2  # a user's client tells nothing


def test_a_client_of_the_hooks_that_lost_its_connection_is_the_first_to_know(caplog):
    voice = OutageVoice(client_threads("trainer-j-0"), None, lambda: False)
    caplog.set_level(logging.WARNING, logger="kafka.cluster")
    refused = "Connection failed: KafkaConnectionError: 111 ECONNREFUSED"
    assert voice.filter(r := record("kafka-io-users-own-consumer", msg=refused)) and r.levelno == logging.ERROR
    assert not voice.filter(record("kafka-io-trainer-j-0", msg=refused))
    assert not voice.filter(record("kafka-io-trainer-j-0", logging.WARNING, msg="No node available"))  # it settles


def test_a_probe_that_finds_no_broker_demotes_before_the_spool_knows(caplog):
    from faultlens.streams.broker import free_port

    voice = OutageVoice(client_threads("trainer-j-0"), f"127.0.0.1:{free_port()}", lambda: False)
    caplog.set_level(logging.WARNING, logger="kafka.cluster")
    assert not voice.filter(record("kafka-io-trainer-j-0"))


def test_the_filter_is_on_every_kafka_logger_while_the_hook_lives_and_gone_after(tmp_path, caplog):
    from faultlens.streams.broker import free_port

    settings = KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}")  # no broker: the hook starts anyway
    hook = TrainerHook(
        job="j", rank=0, node="n", settings=settings, keys=KEY.verify_keys(), state_dir=tmp_path, flight_recorder=False
    )
    names = ("kafka.net.connection", "kafka.cluster", "kafka.consumer.fetcher", "faultlens.streams.command_listener")
    try:
        assert all(hook.voice in logging.getLogger(n).filters for n in names)
        assert "faultlens.trainer_hooks.outbox" not in [
            n for n in logging.root.manager.loggerDict if hook.voice in getattr(logging.getLogger(n), "filters", [])
        ]
        caplog.set_level(logging.WARNING)
        caplog.set_level(logging.NOTSET, logger="kafka")  # kafka's loggers as a user's script has them
    finally:
        hook.close()
    # Gone once the clients still closing after close() returned (the listener's consumer, kafka's
    # IO threads) have ended; meanwhile what they say as they close is DEBUG.
    wait_until(
        lambda: not any(hook.voice in logging.getLogger(n).filters for n in names),
        progress=lambda: sorted(t.name for t in threading.enumerate()),
        stall_s=STALL_S,
        what="the hook's clients to finish closing",
    )
    loud = [(r.name, r.threadName, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [x for x in loud if x[0] != "faultlens.trainer_hooks.outbox"], loud


def _thread_of_ours(name: str, says: list[tuple[str, int, str]]) -> tuple[threading.Thread, threading.Event]:
    """A stand-in for a client's IO thread: logs ``says`` (logger, level, text) at once, then stays
    alive until its event is set (a client still closing)."""
    done = threading.Event()

    def run() -> None:
        for logger, level, text in says:
            logging.getLogger(logger).log(level, text)
        done.wait()

    thread = threading.Thread(target=run, name=name, daemon=True)
    return thread, done


CLOSING_WORDS = [
    ("kafka.net.transport", logging.ERROR, "<KafkaTCPTransport [127.0.0.1:9092]>: Abort (Cancelled)"),
    ("kafka.net.connection", logging.ERROR, "<KafkaConnection node_id=bootstrap-0>: Connection lost: Cancelled"),
    ("kafka.net.selector", logging.ERROR, "IO loop crashed (client_id=trainer-j-0)"),
]


def test_while_closing_all_the_hooks_clients_say_is_debug_the_broker_up_and_a_users_client_still_speaks(caplog):
    caplog.set_level(logging.WARNING)
    caplog.set_level(logging.NOTSET, logger="kafka")
    voice = OutageVoice(client_threads("trainer-j-0"), None, lambda: False).install()  # the broker is up
    try:
        assert voice.filter(r := record("kafka-io-trainer-j-0")) and r.levelno == logging.ERROR  # not closing: kept
        voice.closing()
        ours, ours_done = _thread_of_ours("kafka-io-trainer-j-0", CLOSING_WORDS)
        theirs, theirs_done = _thread_of_ours("kafka-io-users-own-consumer", CLOSING_WORDS[:1])
        for thread in (ours, theirs):
            thread.start()
        ours_done.set(), theirs_done.set()
        ours.join(STALL_S), theirs.join(STALL_S)
    finally:
        voice.remove()
    loud = [(r.threadName, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [("kafka-io-users-own-consumer", CLOSING_WORDS[0][2])], loud
    assert voice.demoted == len(CLOSING_WORDS)


def test_a_released_voice_stays_until_the_clients_still_closing_have_ended(caplog):
    caplog.set_level(logging.WARNING)
    caplog.set_level(logging.NOTSET, logger="kafka")
    voice = OutageVoice(client_threads("trainer-j-0"), None, lambda: False).install().closing()
    lingering, finish = _thread_of_ours("trainer-j-0-network-thread", [])
    lingering.start()
    waiter = voice.release()
    assert waiter is not None and voice in logging.getLogger("kafka.net.transport").filters
    late, late_done = _thread_of_ours("trainer-j-0-network-thread", CLOSING_WORDS[:1])  # says it after close()
    late_done.set()
    late.start()
    late.join(STALL_S)
    finish.set()
    wait_until(lambda: not waiter.is_alive(), progress=lambda: lingering.is_alive(), stall_s=STALL_S,
               what="the voice to go once its client's thread ended")
    assert voice not in logging.getLogger("kafka.net.transport").filters
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING] and voice.demoted == 1
    assert voice.release() is None  # nothing of ours alive: removed at once


def test_the_launcher_closes_its_clients_quietly(caplog):
    caplog.set_level(logging.WARNING)
    caplog.set_level(logging.NOTSET, logger="kafka")
    threads = client_threads("faultlens", "faultlens-commands")
    closed: list[str] = []

    def close_consumer() -> None:  # its IO thread says its last words as it stops
        thread, done = _thread_of_ours("kafka-io-faultlens", CLOSING_WORDS)
        done.set()
        thread.start()
        thread.join(STALL_S)
        closed.append("consumer")

    voice = OutageVoice(threads, None, lambda: False, "faultlens").install()  # the broker is up
    waiter = quiet_close(voice, close_consumer, lambda: closed.append("children"))
    assert closed == ["consumer", "children"] and waiter is None  # nothing of ours left running: gone
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not any(isinstance(f, OutageVoice) for f in logging.getLogger("kafka.net.transport").filters)


def test_librdkafka_lines_of_the_hooks_client_are_told_by_their_client_name(caplog):
    """The confluent client's lines, as librdkafka logs them (a real producer against no broker)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from faultlens.streams.broker import free_port
    from faultlens.streams.confluent_config import confluent_config

    bootstrap = f"127.0.0.1:{free_port()}"
    voice = OutageVoice(frozenset(), bootstrap, lambda: True, "trainer-c-0").install()
    caplog.set_level(logging.WARNING)
    caplog.set_level(logging.NOTSET, logger="faultlens.streams.librdkafka")
    producers = {
        cid: confluent_kafka.Producer(confluent_config(KafkaSettings(bootstrap=bootstrap, client_id=cid)))
        for cid in ("trainer-c-0", "users-own")
    }
    try:

        def failures(cid):
            return [r for r in caplog.records if f"[{cid}#producer" in r.getMessage()]

        wait_until(
            lambda: failures("users-own"),
            progress=lambda: [p.poll(0.1) for p in producers.values()] and len(caplog.records),
            stall_s=STALL_S,
            what="librdkafka to log a refused connection",
        )
        wait_until(
            lambda: voice.demoted,
            progress=lambda: producers["trainer-c-0"].poll(0.1) or voice.demoted,
            stall_s=STALL_S,
            what="the hook's client to log a refused connection",
        )
        assert failures("users-own")[0].levelno >= logging.WARNING and not failures("trainer-c-0")
    finally:
        voice.remove()


def _reset_under_a_listener(listener) -> "tuple[object, object]":
    """A kafka-python transport whose connection the peer reset (RST) while the peer's listening socket
    still takes connections: a broker killed with a request of ours unread, as its connections are
    closed a moment before its listening socket (on a loaded machine, a long moment)."""
    import socket
    import struct

    from kafka.net.selector import NetworkSelector
    from kafka.net.transport import KafkaTCPTransport

    mine = socket.create_connection(listener.getsockname())
    theirs, _ = listener.accept()
    mine.sendall(b"\x00\x00\x00\x04fetch")  # a request the dying broker never read
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    theirs.close()  # with unread data (and no linger): a reset, as the kernel closes a killed broker's sockets
    net = NetworkSelector()
    return net, KafkaTCPTransport(net, mine)


def _recv_on(thread: str, transport) -> None:
    worker = threading.Thread(target=transport._sock_recv, name=thread)  # what the client's IO thread runs
    worker.start()
    worker.join(STALL_S)


def test_a_connection_the_broker_reset_is_the_broker_lost_while_its_listening_socket_still_answers(caplog):
    """test_launcher_broker_killed: kafka-python logs a reset connection ("Error receiving network data
    closing socket") at ERROR with its traceback, the reset said only in the record's exception; the
    TCP probe made then may still be answered by the dying broker's listening socket. The reset is the
    connection failing, as an empty read ("socket disconnected") is: the broker lost, said once."""
    import socket

    told: list[int] = []
    caplog.set_level(logging.WARNING)
    caplog.set_level(logging.NOTSET, logger="kafka")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        bootstrap = "%s:%d" % listener.getsockname()
        voice = OutageVoice(client_threads("trainer-j-0"), bootstrap, lambda: False,
                            on_lost=lambda: told.append(1)).install()
        nets = []
        try:
            for thread in ("kafka-io-users-own-consumer", "kafka-io-trainer-j-0"):
                net, transport = _reset_under_a_listener(listener)
                nets.append(net)
                _recv_on(thread, transport)
        finally:
            voice.remove()
            for net in nets:
                net.close()
    loud = [(r.threadName, r.levelname, r.exc_info[0] if r.exc_info else None)
            for r in caplog.records if r.levelno >= logging.WARNING]
    # A user's own client still logs it as kafka-python does; the hook's is demoted and says the loss once.
    assert loud == [("kafka-io-users-own-consumer", "ERROR", ConnectionResetError)], loud
    assert told == [1] and voice.demoted == 1
