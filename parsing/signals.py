"""A process killed by a signal, in every shape a trainer's log prints it, and what the signal says.

Who prints it and how (all read here, then judged by the signal alone):

- an IDE or a shell's exit status: ``Process finished with exit code 139 (interrupted by signal 11:
  SIGSEGV)``, ``exit code 137``, ``exit status 135`` (128 + the signal);
- Python's fault handler: ``Fatal Python error: Segmentation fault`` (glued after a progress bar
  when tqdm's ``\\r`` line was never ended);
- torchrun's failure summary: ``Signal 7 (SIGBUS) received by PID 10``, ``exitcode  : -7``;
  glog / abseil: ``*** SIGSEGV (@0x0) received by PID 1234``; ``torch.multiprocessing``:
  ``process 0 terminated with signal SIGKILL``; Python's ``died with <Signals.SIGSEGV: 11>``;
- torch's DataLoader signal handler: ``ERROR: Unexpected bus error encountered in worker``;
- a debugger's stop (gdb: ``Program received signal SIGSEGV, Segmentation fault.``) and a
  program's own crash handler naming the fatal signal it caught (``got SIGSEGV for VA=...``,
  ``CRASH (pid=25720) by SIGSEGV``);
- the shells: bash ``line 1:  4242 Segmentation fault      (core dumped) python train.py``, zsh
  ``zsh: segmentation fault (core dumped)  python train.py``, a bare ``Killed``; Slurm's ``srun:
  error: node17: task 3: Bus error``; a DataLoader's ``killed by signal: Segmentation fault``;
- the HPC runtimes: UCX's ``Caught signal 11 (Segmentation fault: ...)``, Open MPI's ``Signal:
  Segmentation fault (11)`` and mpirun's ``exited on signal 9 (Killed)``, torchelastic's ``got signal: 15``,
  PALS' ``rank 3 died from signal 11``.

What the signal says about a trainer (docs/rules.md, "Signals"):

- SIGSEGV, SIGILL, SIGFPE: native code of the program crashed (an extension, a data loader's
  library, a bad build): ``user_code``, with a stop-time diagnosis first, since a driver or a bad
  host can segfault too; a line naming libcuda / libnvidia / libnccl makes it theirs, as the
  kernel's segfault record does (parsing.kernel_host.fault_of_library);
- SIGBUS: in a trainer, shared memory (``/dev/shm``) exhausted under a DataLoader: ``host_oom``;
- SIGKILL: the OOM killer is its usual sender: ``host_oom``, acted on (restart) when the line
  itself names memory, else recorded (action none) for the kernel's OOM record to confirm;
- SIGABRT: the end of an error printed before it (a C++ exception, NCCL's watchdog): recorded,
  ``user_code`` whoever reports it, the process's own handler or a launcher, a shell, a debugger
  (docs/design.md §9: a record of the program's death never makes the machine suspect);
- SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1/2, SIGXCPU, SIGPIPE: sent by a person, the scheduler or
  the launcher tearing the other ranks down: recorded, no fault;
- no signal, a failing exit status (Slurm's ``Exited with exit code 1``, mpirun's ``exited with non-zero
  status``, ``returned non-zero exit status 2``, torchrun's ``exitcode  : 1``): the end of an error
  printed before it, recorded, as SIGABRT is.
"""

from __future__ import annotations

import re
import signal as signal_mod
from typing import Any

from faultlens.parsing.kernel_host import fault_of_library
from faultlens.parsing.line import any_of, common

Found = list[tuple[str, dict[str, Any]]]

# A shell in another locale prints glibc's translation of strsignal's text ("已杀死" for "Killed"):
# the fatal ones (SIGKILL, SIGSEGV, SIGBUS) in the locales trainers' logs turn up in.
_LOCALE = {"已杀死": "SIGKILL", "段错误": "SIGSEGV", "总线错误": "SIGBUS",                       # zh_CN
           "getötet": "SIGKILL", "speicherzugriffsfehler": "SIGSEGV", "bus-fehler": "SIGBUS",  # de
           "убито": "SIGKILL", "ошибка сегментирования": "SIGSEGV", "ошибка шины": "SIGBUS",  # ru
           "processus arrêté": "SIGKILL", "erreur de segmentation": "SIGSEGV",                # fr
           "terminado (killed)": "SIGKILL", "violación de segmento": "SIGSEGV",               # es
           "強制終了": "SIGKILL", "セグメンテーション違反です": "SIGSEGV", "バスエラーです": "SIGBUS"}  # ja
# Lowered, one of these is on every line read_signal takes (the trainer parser's pre-filter).
# (round 27) docker compose's 'comfyui exited with code 137': the shapes read 'exited with code', the filter did not let it in.
LITERALS = ("sig", "signal", "segmentation fault", "floating-point exception", "bus error", "killed", "aborted", "illegal instruction",
            "floating point exception", "core dumped", "exit code", "exit status", "exitcode", "exit_code", "exit_status", "return code",
            "terminated", "exited with code", "exited with status", *_LOCALE)
_QUICK = any_of(LITERALS)

_NUMBERS = {s.name: int(s) for s in signal_mod.Signals if not s.name.startswith("SIG_")}
_BY_NUMBER = {v: k for k, v in sorted(_NUMBERS.items(), reverse=True)}
# The words the C library (strsignal) and the shells print for a signal.
_BY_WORDS = {"segmentation fault": "SIGSEGV", "bus error": "SIGBUS", "killed": "SIGKILL", "aborted": "SIGABRT",
             "abort": "SIGABRT", "illegal instruction": "SIGILL", "floating point exception": "SIGFPE",
             "terminated": "SIGTERM", "hangup": "SIGHUP", "quit": "SIGQUIT", **_LOCALE}
_WORDS = (r"segmentation fault|bus error|killed|aborted|illegal instruction|floating point exception|terminated|hangup|"
          + "|".join(re.escape(w) for w in sorted(_LOCALE, key=len, reverse=True)))

_SHAPES = re.compile(
    # torchrun / glog / abseil: "Signal 7 (SIGBUS) received by PID 10", "*** SIGSEGV (@0x0) received by PID 12"
    r"\bSignal (?P<n1>\d{1,2}) \((?P<s1>(?-i:SIG[A-Z0-9]+))\) received by PID"
    # (glibc prints a null address "(nil)"; Google's internal build adds ", see go/stacktraces#s15" before "received")
    r"|\*\*\* (?P<s2>(?-i:SIG[A-Z0-9]+)) (?:\(@(?:[0-9a-fx]+|\(nil\))\)(?:, see \S+)? )?received (?:by PID|at time)"
    # an IDE: "exit code 139 (interrupted by signal 11: SIGSEGV)"
    r"|\binterrupted by signal (?P<n3>\d{1,2})(?:: (?P<s3>(?-i:SIG[A-Z0-9]+)))?"
    # torch.multiprocessing, subprocess, Python's enum repr
    r"|\b(?:terminated|killed|died|exited) (?:with|by) (?:signal:? )?(?:<Signals\.)?(?P<s4>(?-i:SIG[A-Z0-9]+))\b"
    r"|\b(?:killed|terminated) by signal:? (?:(?P<n5>\d{1,2})\b|(?P<w5>" + _WORDS + r"))"
    # Python's fault handler, anywhere on the line (after a progress bar)
    # (after a module's own name too: "Fatal Python error: pygame_parachute: (pygame parachute) Segmentation Fault")
    r"|Fatal Python error: (?:[\w.]+: (?:\([^)]{0,40}\) )?)?(?P<w6>Segmentation fault|Bus error|Aborted|Floating point exception|Illegal instruction)"
    # the shells and Slurm: "line 1: 4242 Segmentation fault (core dumped) python", "zsh: killed  python",
    # "srun: error: node17: task 3: Bus error", a bare "Killed" / "Segmentation fault (core dumped)"
    r"|(?:\bzsh: |\bline \d+: +\d+ +|\btask \d+: |^\s*\d+ +)(?P<w7>" + _WORDS + r")\b(?: +\(core dumped\))?(?=\s|$)"
    # the same at the line's start without the shell's name: alone, or the command after two spaces
    r"|^\s*(?P<w10>" + _WORDS + r")(?: +\(core dumped\))?(?:\s*$| {2,}\S)"
    # (round 30) the same word where the shell wrote it after a progress bar it cut short (no newline after tqdm's
    # "[00:27<02:17,  6.17it/s]"): " 20%|####    | 216/1063 [00:27<02:17,  6.17it/s]Killed"
    r"|/(?:s|it)\](?P<w20>" + _WORDS + r")(?: +\(core dumped\))?\s*$"
    # torch's DataLoader signal handler: "ERROR: Unexpected bus error encountered in worker."
    r"|\bUnexpected (?P<w9>segmentation fault|bus error|floating[- ]point exception|illegal instruction) encountered\b"
    # a debugger's stop ("Program received signal SIGSEGV, Segmentation fault.") and a program's own
    # crash handler naming the fatal signal it caught ("got SIGSEGV for VA=...", "CRASH (pid=1) by SIGSEGV")
    r"|\bProgram (?:received|terminated with) signal (?P<s11>(?-i:SIG[A-Z0-9]+))"
    r"|\b(?:got|caught|by) (?P<s12>(?-i:SIG(?:SEGV|BUS|ILL|FPE)))\b"
    # a program's or the system's own report with the number and the name: systemd-coredump's "terminated
    # abnormally with signal 11/SEGV", GraphicsMagick's "abort due to signal 11 (SIGSEGV)"
    r"|\bterminated abnormally with signal (?P<n13>\d{1,2})/(?-i:[A-Z]+)\b"
    r"|\bdue to signal (?P<n14>\d{1,2}) \((?-i:SIG[A-Z0-9]+)\)"
    # the HPC runtimes' handlers and launchers: UCX's "Caught signal 11 (Segmentation fault: address not
    # mapped ...)" (openucx src/ucs/debug/debug.c), Open MPI's stack trace "Signal: Segmentation fault (11)"
    # (opal/util/stacktrace.c) and mpirun's "exited on signal 9 (Killed)", torchelastic's SignalException
    # "Process 1234 got signal: 15" (torch/distributed/elastic/multiprocessing/api.py), and (round 39) HPE Cray PALS'
    # mpiexec naming a rank that died ("<host>: rank 25 died from signal 6 and dumped core"), valgrind's record of the
    # signal that ended the program it ran ("==64539== Process terminating with default action of signal 11 (SIGSEGV)")
    r"|\b(?:caught signal|exited on signal|got signal:?|died from signal|default action of signal) (?P<n15>\d{1,2})\b"
    r"|\bSignal: [a-z][a-z ]{1,40}? \((?P<n16>\d{1,2})\)"
    # Android's C library (bionic's debuggerd handler, in the process): "F libc : Fatal signal 6 (SIGABRT), code -1 ..."
    r"|\bFatal signal (?P<n17>\d{1,2}) \((?-i:SIG[A-Z0-9]+)\)"
    # the Intel Fortran runtime's handler (forrtl): "forrtl: error (78): process killed (SIGTERM)",
    # "forrtl: severe (174): SIGSEGV, segmentation fault occurred"
    r"|\bprocess (?:killed|interrupted|terminated|aborted) \((?P<s18>(?-i:SIG[A-Z0-9]+))\)"
    r"|\bforrtl: \w+ \(\d+\): (?P<s19>(?-i:SIG[A-Z0-9]+))\b"
    # an exit status of 128 + N, or torchrun's negative exit code
    # (a key's name too: "learner_exit_code: 137", "exit_status=139")
    # (round 24) DeepSpeed's launcher naming a rank's Popen returncode, negative for a signal ("[launch.py:324:sigkill_handler]
    # [...] exits with return code = -11")
    r"|(?<![^\W_])(?:exit(?:ed with)?[ _](?:code|status)|exitcode|exits with return code)\s*[:=]?\s*(?:(?P<x8>1(?:29|3\d|4\d|5\d))\b|(?P<neg8>-\d{1,2})\b)",
    re.IGNORECASE,
)
# A process that exited with a failing status and no signal (round 14): Slurm's "srun: error: node17: task 3:
# Exited with exit code 1", mpirun's "exited with non-zero status", Python's CalledProcessError "returned
# non-zero exit status 1", torchrun's "exitcode  : 1" / "failed (exitcode: 1)". The status names no cause:
# the error printed before it does, as for SIGABRT; recorded, so no reader guesses a class from its words.
_EXIT_STATUS = re.compile(
    r"\bExited with exit code (?:[1-9]\d?|1[01]\d|12[0-7])\b|\bexited with non-zero status\b"
    r"|\breturned non-zero exit status (?:[1-9]\d?|1[01]\d|12[0-7])\b"
    # (round 24) DeepSpeed's launcher: "[launch.py:324:sigkill_handler] [...] exits with return code = 1"
    r"|\bexits with return code\s*=\s*(?:[1-9]\d?|1[01]\d|12[0-7])\b"
    r"|(?<![^\W_])exitcode\s*:?\s*(?:[1-9]\d?|1[01]\d|12[0-7])\b(?!\s*\.\d)",
    re.IGNORECASE,
)
_MEMORY = re.compile(r"\boom\b|out of memory|oom[-_ ]?kill|memory|\bOOMKilled\b", re.IGNORECASE)
_LIB = re.compile(r"\b(lib[\w+\-]+\.so[\w.]*)")

# signal -> (fault, action, severity): the reading above.
_CRASH = ("user_code", "stop_time_diagnosis", "error")
_READINGS = {"SIGSEGV": _CRASH, "SIGILL": _CRASH, "SIGFPE": _CRASH, "SIGBUS": ("host_oom", "restart", "error")}
_SENT = ("unknown", "none", "info")  # SIGTERM, SIGINT and the rest: sent, not a fault
# An abort is the end of an error printed before it, the program's whoever records it (docs/design.md §9,
# round 17: the process's own handler, a launcher's, a shell's or a debugger's record alike): recorded.
_ABORT = ("user_code", "none", "info")


_NAMED = ("s1", "s2", "s3", "s4", "s11", "s12", "s18", "s19")


def _name(m: re.Match[str]) -> str | None:
    for g in _NAMED:
        if m.group(g):
            return m.group(g).upper()
    for g in ("n1", "n3", "n5", "n13", "n14", "n15", "n16", "n17"):
        if m.group(g):
            return _BY_NUMBER.get(int(m.group(g)))
    for g in ("w5", "w6", "w7", "w9", "w10", "w20"):
        if m.group(g):
            return _BY_WORDS.get(m.group(g).lower().replace("-", " "))
    if m.group("x8"):
        return _BY_NUMBER.get(int(m.group("x8")) - 128)
    if m.group("neg8"):
        return _BY_NUMBER.get(-int(m.group("neg8")))
    return None


def read_signal(msg: str, raw: str) -> Found | None:
    """A ``worker_failed`` event for a line that says a process died of a signal, or None."""
    if not _QUICK.search(msg.lower()):
        return None
    m = _SHAPES.search(msg)
    if m is None:
        status = _EXIT_STATUS.search(msg)
        if status is None:
            return None
        return [("worker_failed", common(raw, *_SENT, rule="exit.status", text=status.group(0)[:256]))]
    # (round 29) A status first and the signal's name after it ("Process finished with exit code 138 (interrupted by signal
    # 10: SIGBUS)", PyCharm on macOS, where SIGBUS is 10 and Linux's 10 is SIGUSR1): the name is what the printing
    # machine meant; its numbers are its own platform's.
    if not any(m.group(g) for g in _NAMED):
        m = next((later for later in _SHAPES.finditer(msg, m.end()) if any(later.group(g) for g in _NAMED)), m)
    name = _name(m)
    if name is None or name not in _NUMBERS:
        return None
    fault, action, severity = _READINGS.get(name, _SENT)
    if name == "SIGABRT":
        fault, action, severity = _ABORT
    if name == "SIGKILL":
        fault, action, severity = ("host_oom", "restart", "error") if _MEMORY.search(msg) else ("host_oom", "none", "info")
    lib = _LIB.search(msg)
    if lib and fault == "user_code":
        fault = fault_of_library(lib.group(1)) or fault
    return [("worker_failed", common(raw, fault, action, severity, rule=f"signal.{name.lower()}", signal=name,
                                     signum=_NUMBERS[name], lib=lib.group(1) if lib else None, text=m.group(0).strip()[:256]))]  # fmt: skip
