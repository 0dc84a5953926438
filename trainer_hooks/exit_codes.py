"""Exit codes a trainer process uses to tell the launcher why it stopped on a command.

They sit in the BSD ``sysexits`` gap (64-78 are taken loosely; 75-79 chosen so they never clash
with Python's 1, a signal's 128+N, or torchrun's own codes). The launcher restarts on 75-78 and
stops the job on 79; any other non-zero code is a crash it reports and waits on a command for.
"""

from __future__ import annotations

EVICTED = 75  # this node was evicted: restart the job without it
RESTART = 76  # restart in place from the last checkpoint
ROLLBACK = 77  # restart from the checkpoint before the last one
REATTEMPT = 78  # restart in place after a transient failure (stop-time diagnosis passed)
STOPPED = 79  # stopped by command: do not restart

ACTION_EXIT = {
    "evict": EVICTED,
    "restart": RESTART,
    "rollback": ROLLBACK,
    "reattempt": REATTEMPT,
    "stop": STOPPED,
}
EXIT_ACTION = {code: action for action, code in ACTION_EXIT.items()}
