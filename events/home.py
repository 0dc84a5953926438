"""Where faultlens keeps its files on a machine: ``$FAULTLENS_HOME``, else ``~/.faultlens``.

Here rather than beside the embedded broker that first needed it: a command receiver's memory of
the commands it has seen (events/command_memory.py) lives there too, and the bus's pure modules
must not import the Kafka side to find a folder.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "FAULTLENS_HOME"
# The public half of the key `faultlens up` signs with when it made one for this run (in the home
# folder): `up` writes it, a `faultlens run` that started `up` for its job hands it to its workers.
EPHEMERAL_VERIFY_KEY = "ephemeral-command-verify-key.pem"


def faultlens_home() -> Path:
    home = Path(os.environ.get(HOME_ENV) or Path.home() / ".faultlens")
    home.mkdir(parents=True, exist_ok=True)
    return home
