"""Running the pipeline's processes (faultlens subcommands, the launcher) for end-to-end tests
and benches: each one a real subprocess whose JSON-line stdout is collected as it comes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable


class Proc:
    """A subprocess; ``lines`` fills with the JSON objects it prints, stderr goes to ``log_path``."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path):
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        self.popen = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=self._log,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                self.lines.append(obj)

    def find(self, predicate: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        return [line for line in list(self.lines) if predicate(line)]

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
            except ProcessLookupError:
                pass
        self._reader.join(2)
        self._log.close()
        return self.popen.returncode

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def faultlens(name: str, args: Iterable[str], env: dict[str, str], log_dir: Path) -> Proc:
    return Proc(name, [sys.executable, "-m", "faultlens", *args], env, log_dir / f"{name}.log")


def launcher(args: Iterable[str], trainer_args: Iterable[str], env: dict[str, str], log_dir: Path) -> Proc:
    argv = [sys.executable, "-m", "faultlens.trainer_hooks.launcher", *args, "--log-dir", str(log_dir / "ranks"),
            "--", *trainer_args]
    return Proc("launcher", argv, env, log_dir / "launcher.log")


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    """The first truthy value of ``predicate()`` within ``timeout`` seconds, else None."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
