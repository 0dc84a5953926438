"""What the trainer hook says when it obeys a command (its `train`/`command_ack` reason), in one
place, so that whatever stands in for the hook (the demo's simulated trainers) answers alike."""

from __future__ import annotations

from faultlens.trainer_hooks.exit_codes import ACTION_EXIT


def obeyed_reason(action: str) -> str | None:
    """The reason of an obeyed ``action``'s ack; None for an action the trainer does not carry out
    (``run_checks`` is the node agent's): it is neither obeyed nor acked by the trainer."""
    if action == "checkpoint":
        return "checkpoint at the next step boundary"
    if action == "capture_stacks":
        return "stacks published"
    if action in ACTION_EXIT:
        return f"exiting with code {ACTION_EXIT[action]}"
    return None
