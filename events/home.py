"""Where faultlens keeps its files on a machine: ``$FAULTLENS_HOME``, else ``~/.faultlens``.

Here rather than beside the embedded broker that first needed it: a command receiver's memory of
the commands it has seen (events/command_memory.py) lives there too, and the bus's pure modules
must not import the Kafka side to find a folder.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "FAULTLENS_HOME"


def faultlens_home() -> Path:
    home = Path(os.environ.get(HOME_ENV) or Path.home() / ".faultlens")
    home.mkdir(parents=True, exist_ok=True)
    return home
