"""Hooks a torch training loop uses: step telemetry, obeying signed commands, stack dumps."""
