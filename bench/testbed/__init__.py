"""The test bed the test suite and the benches share: hand-written foreign traces (`foreign`), stack
dumps in py-spy's and faulthandler's layouts (`stack_samples`), real log lines (`log_samples`), a fake
NVML module (`fake_nvml`), a private Slurm cluster (`slurm_cluster`), the split-stage backlog harness
(`backlog_split`), the topic reads of consumers' output (`topic_reads`) and a producer stand-in that
keeps what a trainer hook sends (`sent_events`).

It lives under bench/ so that a bench never imports tests/ (tests/test_bench_standalone.py checks
that); tests import it from here. Nothing here is product code: it builds inputs and reads outputs.
"""
