"""A trainer process's last step: leave without the interpreter's teardown once everything is written.

torch's gloo worker threads may still be releasing the last collective's work (its thread-local
state holds a Python object) when Python shuts down; the thread then takes the GIL during
``Py_FinalizeEx``, is made to exit, and its unwinding through a noexcept destructor calls
``std::terminate``: a run that finished, saved and destroyed its process group dies by SIGABRT
("terminate called without an active exception"), which its launcher reads as a failed worker.
``destroy_process_group`` does not stop those threads. Seen in core dumps of the docs' torchrun
snippet, about once in 20 loaded runs (pytorch/pytorch#179291 describes the same race).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def leave_without_teardown(code: int) -> NoReturn:
    """Flush logging and the standard streams, then ``os._exit(code)``: no interpreter teardown, so
    no gloo thread can meet a finalising interpreter. Call it last, after the hook is closed and the
    process group destroyed; atexit handlers do not run."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can be written anyway
            pass
    os._exit(code)
