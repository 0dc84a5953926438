"""A program's own failure read by its frame (parsing.own_failure): lines written here in each frame a launcher,
an MPI or UCX library or a language runtime states its own failure in, each next to the healthy look-alike its
guard is for, read on a job's stream (``nccl``) by the trainer parser as a whole and by the grammar alone."""

from __future__ import annotations

import pytest

from faultlens.parsing.own_failure import read_own_failure
from faultlens.parsing.registry import parser_for
from faultlens.parsing.state_grammar import read_state

# (fault line, its healthy look-alike): the look-alike is in the same frame, so the guard is what tells them apart.
PAIRS = [
    # a program's name, then its level: error or worse is a failure; a warning, the scheduler's own daemons and clients
    # (which log a job's end and a queue's answer at error), a signal from outside and an option ignored are not
    ("mdrun: error: unknown value 'cyclic:9' for --layout", "mdrun: warning: unknown value 'cyclic:9' for --layout, using block"),
    (
        "hipcc: fatal: cannot use -o with more than one input file",
        "slurmstepd: error: couldn't chdir to `/home/u1': No such file or directory: going to /tmp instead",
    ),
    ("srun: error: Invalid --cpu-bind specification 'maps'", "srun: error: gpu-b07: tasks 0-3: Terminated"),
    ("srun: error: Invalid --mem-bind specification 'maps'", 'srun: error: Ignoring conflicting option "pty" in plugin "pty"'),
    ("srun: error: Invalid --gres specification", "srun: error: Unable to allocate resources: Job held by its submitter"),
    (
        "forrtl: severe (64): input conversion error, unit 5, file /scratch/run3/params.in",
        "forrtl: error (78): process killed (SIGTERM)",
    ),
    # Open MPI's error handler and MPICH's abort: a hedge is no statement, a call on the fabric is the fabric's
    ("*** An error occurred in MPI_Comm_split", "*** An error occurred in MPI_Comm_split if the colour is negative?"),
    (
        "Abort(672779) on node 5 (rank 5 in comm 0): Fatal error in PMPI_Bcast: Invalid root, error stack:",
        "Abort(1615247) on node 2 (rank 2 in comm 0): Fatal error in PMPI_Init_thread: Other MPI error, ibv_create_qp failed on mlx5_2",
    ),
    # a runtime's panic: a panic on the GPU stack is that stack's
    (
        "ingest-1  | thread 'tokio-runtime-worker' (7) panicked at src/batcher.rs:88:14:",
        "ingest-1  | thread 'main' (1) panicked at src/gpu.rs:40:9: CUDA_ERROR_OUT_OF_MEMORY from cuMemAlloc",
    ),
    # a library's source position, its name and its level: ERROR is a failure, WARN is not, a queue pair's completion is the fabric's
    (
        "[1701890001.402113] [gpu-a12:4410:0]     ucp_ep.c:1508 UCX  ERROR no active messages transport to <no debug data>: Unsupported operation",
        "[1701890001.402113] [gpu-a12:4410:0]     ucp_ep.c:1508 UCX  WARN  no active messages transport to <no debug data>: Unsupported operation",
    ),
    (
        "[1701890001.402113] [gpu-a12:4410:0]     parser.c:2073 UCX  ERROR invalid value for UCX_TLS: 'rc_x,shmm'",
        "[1701890001.402113] [gpu-a12:4410:0]  rc_verbs.c:66  UCX  ERROR send completion with error: transport retry counter exceeded on qp 0x1c2",
    ),
    # a launcher's function and source position, then a failing word; its other frames say what it does
    (
        "[mpiexec@gpu-b07] HYD_spawn (lib/utils/launch.c:145): execvp error on file ./solver (No such file or directory)",
        "[mpiexec@gpu-b07] Launch arguments: /usr/bin/hydra_bstrap_proxy --upstream-host gpu-b07 --upstream-port 39221",
    ),
    # a wrapper's word that the command it ran dumped core; its other words are its own doing
    ("timeout: the monitored command dumped core", "timeout: sending signal TERM to command 'python'"),
]


def _own(source: str, line: str) -> list[dict]:
    parser = parser_for(source)
    events = parser.feed(line) + parser.flush()
    return [e.data for e in events if e.data.get("rule") == "own_failure"]


@pytest.mark.parametrize(("fault", "healthy"), PAIRS)
def test_a_program_stating_its_own_failure_in_its_frame_is_user_code_and_its_look_alike_is_not(fault: str, healthy: str) -> None:
    got = _own("nccl", fault)
    assert [(d["fault"], d["action"]) for d in got] == [("user_code", "alert")], fault
    assert read_state(fault, fault, "nccl") is not None
    assert not _own("nccl", healthy), healthy
    reading = read_state(healthy, healthy, "nccl")
    assert reading is None or reading.rule != "own_failure", healthy


def test_the_kernel_log_holds_no_programs_frames() -> None:
    """A frame on the kernel's stream is not a job's program speaking (the kernel's own lines have their own readers)."""
    for fault, _ in PAIRS:
        assert read_own_failure(fault) is not None
        assert not _own("kernel", fault), fault


def test_the_line_says_who_failed_and_in_which_frame() -> None:
    assert read_own_failure("srun: error: Invalid --cpu-bind specification 'maps'") == ("srun", "its own error frame")
    assert read_own_failure("*** An error occurred in MPI_Comm_split") == ("MPI_Comm_split", "Open MPI's error handler")
    (data,) = _own("nccl", "forrtl: severe (64): input conversion error, unit 5, file /scratch/run3/params.in")
    assert "'forrtl' states its own failure (its own severe frame)" in data["finding"]


def test_a_frame_at_a_level_below_a_warning_is_recorded_not_acted_on() -> None:
    """The line's own level word outranks the frame (the grammar's rule for every reading): a supervisor relaying its
    child's panic at INFO."""
    (data,) = _own("nccl", "2026-03-01 10:00:00,123 INFO supervisor: thread 'loader' (3) panicked at src/job.rs:12:5:")
    assert data["action"] == "none"
