"""The command memory of a receiver: command ids already handled, each kept until it expires, so
that a duplicate (an id handled before) is refused.

Kept in a small JSON lines file (``{"id", "expires_at"}`` per line) so that a restarted trainer
hook or node agent still refuses a command it obeyed before the restart: without it, whoever
recorded a signed ``evict`` could play it back to a freshly restarted job within its lifetime.
The file is rewritten atomically on every handled command (commands are rare and the file holds
only unexpired ids, bounded by the receivers' lifetime cap). A damaged file never stops a
receiver: unreadable lines are skipped with a warning, an unreadable file starts an empty memory.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

import orjson

log = logging.getLogger(__name__)

STATE_DIR_ENV = "FAULTLENS_STATE_DIR"
_LIMIT = 10_000  # ids kept at most; with a 10-minute lifetime cap a real receiver holds a handful


def default_state_dir() -> Path:
    """``FAULTLENS_STATE_DIR``, else ``$FAULTLENS_HOME`` (default ~/.faultlens)."""
    from faultlens.events.home import faultlens_home

    env = os.environ.get(STATE_DIR_ENV)
    return Path(env) if env else faultlens_home()


def memory_file(state_dir: str | os.PathLike[str], *parts: object) -> Path:
    """The command memory file of one receiver, e.g. ``memory_file(d, "hook", job, "r3")``: one per
    receiver, since several ranks of a job may share a state directory."""
    name = "-".join(re.sub(r"[^A-Za-z0-9_.=]+", "_", str(p)) for p in parts)
    return Path(state_dir) / f"commands-seen-{name}.jsonl"


class CommandMemory:
    """Ids handled, with their expiry; persisted to ``path`` when one is given."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, limit: int = _LIMIT):
        self.path = Path(path) if path is not None else None
        self.limit = limit
        self._seen: dict[str, float] = {}
        if self.path is not None:
            self._load(self.path)

    def __contains__(self, command_id: object) -> bool:
        return command_id in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def remember(self, command_id: str, expires_at: float, now: float) -> None:
        """Note a handled command (and forget the expired ones); persists before returning, so a
        crash right after obeying cannot lose the id."""
        self._seen = {cid: exp for cid, exp in self._seen.items() if exp >= now}
        self._seen[command_id] = expires_at
        if len(self._seen) > self.limit:
            for cid in sorted(self._seen, key=self._seen.__getitem__)[: len(self._seen) - self.limit]:
                del self._seen[cid]
        if self.path is not None:
            self._save(self.path)

    def _load(self, path: Path) -> None:
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("command memory %s unreadable (%s): starting empty", path, exc)
            return
        bad = 0
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
                self._seen[str(obj["id"])] = float(obj["expires_at"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                bad += 1
        if bad:
            log.warning("command memory %s: %d damaged line(s) skipped, %d id(s) kept", path, bad, len(self._seen))
        log.debug("command memory %s: %d id(s)", path, len(self._seen))

    def _save(self, path: Path) -> None:
        body = b"".join(orjson.dumps({"id": cid, "expires_at": exp}) + b"\n" for cid, exp in self._seen.items())
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(body)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            # Keep obeying with the in-memory set: a full disk must not stop a job being evicted.
            log.warning("command memory %s not saved (%s): a restart would forget %d id(s)", path, exc, len(self._seen))
