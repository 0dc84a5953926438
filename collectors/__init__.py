"""Node agent sources (NVML, kernel log, NCCL/trainer logs, heartbeat, stack capture) and the simulated cluster."""
