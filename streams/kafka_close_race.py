"""kafka-python's own races in closing a client, kept out of a clean shutdown's log (at DEBUG).

kafka-python 3.0.12 runs a consumer's (and an admin client's) network on an IO thread of its own
(kafka/net/selector.py: ``NetworkSelector.start``), but its ``close()`` closes the connections
from the caller's thread, and only then stops that thread (kafka/net/compat.py:
``KafkaNetClient.close`` calls ``self._manager.close()`` before ``self._net.close()``). A
transport's close sets ``self._sock = None`` first and cancels its read task last
(kafka/net/transport.py: ``_close``). When the IO thread resumes that task in between (its socket
was readable: a fetch or heartbeat answer in flight), ``_sock_recv`` calls ``self._sock.recv``
on None (AttributeError), or on the socket just closed (OSError), and logs "Error receiving
network data closing socket" at ERROR with its traceback; the abort that follows is a no-op on a
closed transport. The write side checks for None (``_sock_send``), the read side does not. It is
one client's race with itself, whatever the broker does: a broker that went away is an empty read,
"socket disconnected", on a transport still open, or, killed with a request of the client's still
unread in its socket, a reset: this same record with a ConnectionResetError, on a transport still
open (test_launcher_broker_killed on a loaded machine). That one is no race and stays an ERROR here;
the trainer side's clients hand it to trainer_hooks/outbox_voice.py, which takes it as the broker lost. `faultlens up` stopped by Ctrl-C ended in one
such traceback on a busy CI machine (tests/faultlens/test_cli_errors.py); 1,500 consumer closes
beside a producer gave one of each kind.

The same closes fail a metadata refresh still in flight with ``Cancelled``, which kafka/cluster.py
logs at ERROR ("Metadata refresh: failed Cancelled": 80 of those 1,500 closes), where kafka's own
fetcher logs a cancelled fetch at INFO.

Those two records alone are demoted to DEBUG (seen with -vv, as kafka's other debug lines): a
receive error on a transport still open, a refresh failing any other way, and every other kafka
record pass as they were.
"""

from __future__ import annotations

import logging

from kafka.errors import Cancelled

_RECV = ("kafka.net.transport", "%s: Error receiving network data closing socket")
_REFRESH = ("kafka.cluster", "Metadata refresh: failed %s")


def _closing_race(record: logging.LogRecord) -> bool:
    where = (record.name, record.msg)
    args = record.args if isinstance(record.args, tuple) else ()
    if where == _RECV:
        exc = record.exc_info[1] if record.exc_info else None
        closing = getattr(args[0], "is_closing", None) if args else None
        return isinstance(exc, (AttributeError, OSError)) and callable(closing) and closing() is True
    if where == _REFRESH:
        return bool(args) and isinstance(args[0], Cancelled)
    return False


class CloseRaceFilter(logging.Filter):
    """Demotes the two records of the module doc to DEBUG; emitted only where DEBUG is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or not _closing_race(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_FILTER = CloseRaceFilter()


def quiet_close_race() -> None:
    """Install the filter on the two loggers (once: a logger keeps one copy of a filter)."""
    for name, _ in (_RECV, _REFRESH):
        logging.getLogger(name).addFilter(_FILTER)
