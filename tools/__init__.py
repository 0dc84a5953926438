"""Developer tools: the Xid table generator and the NVML probe (`python -m tools.NAME`)."""
