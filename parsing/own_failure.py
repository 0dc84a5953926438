"""A program's own word that it failed, read by the frame it says it in (issue 54).

A job's stream carries the words of every program the job runs: the launcher (srun, mpiexec), the MPI
and UCX libraries under it, a language's runtime (Fortran's, Rust's), the job's own logger.
Each states its own failure in its own FRAME, the slot of its line format that holds the level, or the
runtime's abort frame: ``srun: error: ...`` and ``forrtl: severe (71): ...`` (a program's name, then its
level), ``*** An error occurred in MPI_Init_thread`` (Open MPI's error handler), ``Abort(1091087) on node 0
(rank 0 in comm 0): Fatal error in PMPI_Init`` (MPICH's), ``thread 'main' panicked at src/x.rs:5:3`` (Rust's),
``select.c:312  UCX  ERROR ...`` (a library's source position, its name, its level), ``[mpiexec@node015] main
(mpiexec.c:1745): error parsing parameters`` (a function and its source position, then a failing word),
``timeout: the monitored command dumped core``, a runtime's report that the program called its abort (``application
called MPI_Abort(MPI_COMM_WORLD, 1)``, ``Called CmiAbort``). A person who has never seen the program reads its failure
from the frame alone, whatever the message after it says; rules name one program's messages, this names
the frames, so the next program's message in a frame of the same kind is read too.

What fails there is the job's program (docs/design.md §9 ``user_code``: it fails on every machine alike,
the job is rolled back, no machine is suspect), so a reading is at most an alert, and it is only ever a
reading of a line nothing more specific took (a rule, a traceback, the line model, the device grammar).
Only the job's own stream is read: the kernel's log holds no program's frames. The guards are the
frames' healthy uses: a level under error in the same slot (``srun: warning:``, ``UCX  WARN``); the
scheduler's own daemons and clients, which log at error what is no failure of the job's program; a message
that names the machine (a device, the GPU or network stack, a signal sent from outside, a queue pair's
completion: the line is that thing's, and its class another's); one that says it retries or recovered
(parsing.state_grammar's guards), goes on without what failed, hedges, or is the scheduler's answer to a
request for resources.

Pure functions over one line; the frames are the regexes below.
"""

from __future__ import annotations

import re

from faultlens.parsing.line import any_of

# fmt: off
# Each frame names who speaks (its group) and ends where its message begins (the guards read the message).
_FRAMES = re.compile(
    # GNU error()'s "prog: error: msg", srun's, Fortran runtime's "forrtl: severe (71): msg"; not the scheduler's own daemons
    # and clients, which log a job's end, a queue's answer and their own configuration at error (slurmstepd's "*** JOB 12
    # ON n1 CANCELLED ***", slurmctld's "Invalid qos"), nor a bare "error:" with no program named (a module system's, git's)
    r"^(?!(?:slurm|sbatch|salloc|sattach|scontrol|sacct|squeue)\w*)(?P<prog>[A-Za-z][\w.+-]{1,40})(?:\[\d+\])?: (?P<level>error|fatal|severe)(?: \(\d+\))?: +(?=\S)"
    # Open MPI's error handler; MPICH's abort
    r"|^\*\*\* An error occurred in (?P<mpi>\w+)"
    r"|^Abort\(\d+\) on node \d+ \(rank \d+ in comm \d+\): Fatal error in (?P<mpich>\w+)"
    # a runtime's panic: Rust's thread panic (with the thread's id newer runtimes print: "thread 'main' (1) panicked at")
    r"|\bthread '(?P<thread>[^']{1,60})'(?: \(\d+\))? panicked at "
    # a library's source position, its name and its level: "select.c:312  UCX  ERROR no copy ..."
    r"|\b[\w-]+\.(?:c|cc|cpp|cu|h):\d+\s+(?P<lib>[A-Z][A-Z0-9]{1,15})\s+(?:ERROR|FATAL)\s"
    # a launcher's frame: its name@host, a function and its source position, then a failing word
    r"|^\[(?P<hydra>[\w-]+)@[\w.-]+\] \w+ \([^()]+\.c:\d+\): (?=.*?\b(?:error|failed))"
    # a wrapper's record that the command it ran dumped core (coreutils' timeout)
    r"|^(?P<wrapper>[\w.-]+): the monitored command dumped core"
    # the program's own call to its runtime's abort, as the runtime reports it (MPICH's "application called MPI_Abort(comm, 1)",
    # Charm++'s "Processor 0 Exiting: Called CmiAbort"): the program chose to end the job
    r"|\b[Cc]alled (?P<abort>[A-Za-z]\w*Abort)\b")
# fmt: on
# What names the machine rather than the program: a device (a GPU, an InfiniBand port, NVLink, a disk, a node), the GPU or
# network stack's calls and libraries (cuMemsetD8, ibv_create_cq, mlx5dv_*, NCCL, NVML), a signal sent from outside
# (SIGTERM, SIGKILL, ``Terminated``: the job was ended, or killed for memory), a verbs queue pair's work completion (docs/design.md
# §9: ``nccl_error``). The line is then that thing's, not the program's own.
_MACHINE = re.compile(
    r"\b(?:gpus?|nvlinks?|nvswitch|ib|infiniband|rdma|roce|mlx\d\w*|hcas?|nics?|disks?|nvme\w*|nodes?|oom\w*"
    r"|out of memory|memory limit|(?-i:cu[A-Z]\w+)|cuda\w*|nccl\w*|ibv_\w+|nvml\w*|nvidia[\w-]*"
    r"|sig(?:term|kill|bus)|terminated|killed|qps?|wqe|completion)\b",
    re.IGNORECASE,
)
# A message that hedges or advises ("error: if the device ..."), that says the program goes on without what failed (it
# ignores an option, an optional plugin is absent), or that is the scheduler's answer to a request for resources (a job
# waiting on or refused capacity, priority or policy is healthy: docs/design.md §9).
_HEDGED = re.compile(
    r"\b(?:if|whether|may|might|could be|please (?:use|set|specify|check)|ignor\w*|plugin|allocate resources)\b|\?", re.IGNORECASE
)
# Literals one of which any frame needs (the parsers' pre-filters carry them).
QUICK = ("error", "fatal", "severe", "fail", "panicked", "dumped core", "abort")
_QUICK = any_of(QUICK)


def quick(lowered: str) -> bool:
    """Whether the lowered line holds a literal some frame needs (most lines do not)."""
    return _QUICK.search(lowered) is not None


def read_own_failure(message: str) -> tuple[str, str] | None:
    """(who, what) when the line is a program stating its own failure in its frame, else None."""
    m = _FRAMES.search(message)
    # the message after the frame (the frame's own words, "on node 0", a host "gpu-a12", are the speaker's); the frame's
    # last group names it: the level closes the first frame, after the program's name
    kind = (m.lastgroup or "") if m is not None else ""
    # an abort call is said mid-sentence: a hedge before it is its own clause's ("if the program called MPI_Abort")
    if m is None or _HEDGED.search(message, 0 if kind == "abort" else m.end()) or _MACHINE.search(message, m.end()):
        return None
    if kind == "level":
        return (m.group("prog"), f"its own {m.group('level').lower()} frame")
    return (m.group(kind), _WHAT[kind])


_WHAT = {
    "mpi": "Open MPI's error handler",
    "mpich": "MPICH's abort",
    "thread": "a thread's panic",
    "lib": "its library's ERROR frame",
    "hydra": "its launcher frame's failure",
    "wrapper": "its command's core dump",
    "abort": "its call to its runtime's abort",
}
