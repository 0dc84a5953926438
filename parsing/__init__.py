"""Log parsing: kernel (dmesg) and trainer / NCCL logs, their timestamps, and the Xid table."""
