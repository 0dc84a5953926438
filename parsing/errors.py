"""What the text of an error means: an NCCL failure, an exception line (a CUDA failure: parsing/cuda_errors.py).

Pure functions over one message, shared by the trainer log parser's single lines, its tracebacks
and the exception lines whose traceback went elsewhere (:func:`classify_headless`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from faultlens.parsing.cuda_errors import classify_cuda
from faultlens.parsing.exception_subject import read_subject
from faultlens.parsing.exceptions import judge
from faultlens.parsing.signals import read_signal

# (issue 54, G12) the pair transport of a collective library other than NCCL failing between two ranks, by the call
# that failed or the transport's own source file before the failure ("Gloo connectFullMesh failed with [.../gloo/
# transport/tcp/pair.h:301] Connect timeout", "[.../gloo/transport/tcp/pair.cc:724] connect [ip]:port: Connection
# refused"): the subject is the ranks' connect, whatever the socket said; not the same file's status ("connected")
# nor a pair's later read or recv (their "Connection closed by peer", "Timed out waiting" keep their readings)
# Asked before NCCL's words, and only of a line that names gloo: every other line the trainer parser asks pays nothing.
_PAIR_TRANSPORT = re.compile(
    r"(?P<mesh>\bconnectFullMesh failed\b)"
    r"|/gloo/transport/\S+:\d+\] (?P<pair>(?i:connect)\b[^\n]*?(?i:\bfailed\b|\brefused\b|\btime ?out\b|\btimed out\b|\bunreachable\b))"
)
_NCCL_ERR = re.compile(
    r"\b(?P<name>ncclRemoteError|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclInvalidUsage|ncclInvalidArgument)\b"
    # gloo says "Connection closed by peer [ip]:port" when the rank across a pair died
    r"|(?P<reset>Connection reset by peer|Connection closed by (?:remote )?peer|Broken pipe)"
    r"|NCCL error in: (?P<where>\S+?),? (?P<why>[^,]*)"
    # torch >= 2.3's watchdog: "NCCL error: remote process exited or there was a network error"
    r"|NCCL error: (?P<why2>[^,.]+)"
    # the c10d store a rendezvous and NCCL's unique id go through: its socket gave up
    r"|(?P<store>Socket Timeout|connect\(\) timed out\. Original timeout was)"
    # older torch's "NCCL Error 2: unhandled system error"; nccl-tests' "Test NCCL failure common.cu:497 'unhandled cuda error'" (older: no "Test ")
    r"|NCCL Error (?P<code>\d+): (?P<why3>[^\n]+)"
    # (round 43) Paddle's enforce on an ncclResult_t in its external-error format ("OSError: (External) NCCL error(1),
    # unhandled cuda error.", paddle/phi/core/enforce.h: "NCCL error(%d), %s."): the result's number and its text
    r"|NCCL error\((?P<pcode>\d+)\), (?P<ptext>[^.\n]+)"
    r"|(?:Test )?NCCL failure (?P<where2>\S+\.\w+:\d+) '(?P<why4>[^']+)'"
    # the origin c10d prints under a C++ exception: "Exception raised from ncclCommWatchdog at .../ProcessGroupNCCL.cpp:1521"
    r"|Exception raised from (?P<origin>\w+) at \S*(?:ProcessGroupNCCL|NCCLUtils)\.\w+:\d+"
    r"|(?P<aborted>NCCL communicator was aborted)"
    # NCCL's init check that two ranks share one GPU (init.cc: "Duplicate GPU detected : rank 0 and rank 1 both on
    # CUDA device 2000"), which it returns as ncclInvalidUsage
    r"|(?P<dup>Duplicate GPU detected) : rank \d+ and rank \d+"
    # an NCCL call that failed, with ncclGetErrorString's text ("ncclCommInitRank failed: unhandled system error", TF's NcclManager)
    r"|\b(?P<call>nccl[A-Z]\w+) failed: (?P<calltext>unhandled (?:system|cuda) error|internal error|invalid (?:argument|usage)|remote process exited[^\n]*)"
    # (round 20) ncclGetErrorString's text thrown from a framework's NCCL helper, the helper's file naming the library
    # (Paddle's PADDLE_ENFORCE on an ncclResult_t: "EnforceNotMet: unhandled cuda error at [.../platform/nccl_helper.h:93]")
    r"|(?P<helpertext>unhandled (?:system|cuda) error|remote process exited[^\n]*?) at \[?\S*\bnccl\w*\.(?:h|cc|cpp|cu):\d+"
    # a glog CHECK on an ncclResult_t (Caffe's NCCL_CHECK: "Check failed: result == ncclSuccess (2 vs. 0)  unhandled system error")
    r"|Check failed: \w+ == ncclSuccess \((?P<ncode>\d+) vs\. 0\)\s+(?P<ntext>[^\n]+)"
    # ncclResult_t in its C enum's spelling, as the bindings print it (cupy's "NcclError: NCCL_ERROR_SYSTEM_ERROR")
    r"|\bNCCL_ERROR_(?P<enum>SYSTEM|INTERNAL|REMOTE|UNHANDLED_CUDA|INVALID_USAGE|INVALID_ARGUMENT)(?:_ERROR)?\b"
    # (round 18) NCCL's own WARN texts of its socket layer and bootstrap without its prefix, as torch repeats NCCL's last
    # error after "Last error:" (misc/socket.cc: "ncclSocketInit: connecting to address  with family 59936 is neither
    # AF_INET(2) nor AF_INET6(10)"; bootstrap.cc: "Bootstrap : no socket interface found")
    r"|(?P<sock>\bBootstrap : no socket interface found|\bncclSocket[A-Z]\w*: [^\n]*?(?:\bfailed\b|is neither AF_INET))"
)
# A bare exception line: a (dotted) type ending in Error / Exception, a colon and a message; after
# whatever prefix a logger or a launcher put before it (a clock, "[rank3]:", "ERROR - ", a task id).
# (round 20) Paddle's enforce type ("paddle.fluid.core.EnforceNotMet: unhandled cuda error at [.../nccl_helper.h:93]",
# paddle/fluid/platform/enforce.h before 2.0) ends in neither word: its message is read as any exception's
# (round 46) Ray's wrapper of a task's exception names the cause's type in parentheses (python/ray/exceptions.py
# RayTaskError.as_instanceof_cause: "ray.exceptions.RayTaskError(NotImplementedError): ray::Worker.f() (pid=..., ip=...)",
# its message at times on the next lines): the cause's type is judged, as the exception's own line would be
# (round 48) also a type whose name opens with underscores, a binding's private class as Python prints it (torch's
# "torch._C._LinAlgError: linalg.svd: The algorithm failed to converge ...", the C class behind torch.linalg.LinAlgError), and
# Python's base type itself ("Exception: ..."), which classify_headless reads as the program's only where it opens the line
_HEADLESS = re.compile(r"(?:^|(?<=[\s\]\)>|:]))(?:(?:[A-Za-z_]\w*\.)*RayTaskError\((?P<cause>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)\):(?: (?P<cmsg>.*))?"
                       r"|(?P<type>(?:[A-Za-z_]\w*\.)*(?:_*[A-Z]\w*(?:Error|Exception)|EnforceNotMet|Exception)): (?P<msg>\S.*))$")
# A RuntimeError whose text says the program is wrong: tensors of the wrong shape, type or device
# (aten's "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the
# same"), a checkpoint that does not fit the model (nn.Module.load_state_dict's "Error(s) in loading
# state_dict for X:"), a tensor autograd saved changed in place (saved_variable.cpp's "one of the
# variables needed for gradient computation has been modified by an inplace operation").
_SHAPE_ERROR = re.compile(r"shapes? cannot be multiplied|size mismatch|must match the size|Expected (?:input|tensor|all tensors|\d)|"
                          r"expected scalar type|dimension out of range|index out of range|mismatch between collectives|"
                          r"Input type \(\S+\) and (?:weight|bias) type \(\S+\) should be the same|Error\(s\) in loading state_dict for |"
                          r"needed for gradient computation has been modified by an inplace operation|"
                          # (issue 54, G10) autograd's check of a view changed in place ("Output 0 of SqueezeBackward1 is a
                          # view and is being modified inplace. This view is the output of a function that returns multiple views")
                          r"\bis a view and is being modified inplace\b|"
                          # aten's item() on a tensor of more than one element (round 15)
                          r"a Tensor with \d+ elements cannot be converted to Scalar|"
                          # a size the program set that its own parallel layout cannot divide (round 16: "world_size (1)
                          # is not divisible by 2", Megatron's and NeMo's checks of their parallel sizes)
                          r"\bis not divisible by\b|"
                          # (round 17) torch.cat's own checks of the tensors it was handed, and torch.utils.cpp_extension's
                          # JIT build of the program's extension failing in its environment (DeepSpeed's 'cpu_adam')
                          r"\bmust have (?:the )?same number of dimensions\b|\bSizes of tensors must match\b|\bError building extension '|"
                          # (round 18) a tensor on the wrong device or of the wrong type for the op ("indices should be either on cpu or on
                          # the same device as the indexed tensor", autograd's "assigned grad has data of a different type")
                          r"\bon the same device as the\b|\bhas data of a different type\b|"
                          # (round 20) torch's argument parser refusing a call's arguments (torch/csrc/utils/python_arg_parser.cpp:
                          # "full() received an invalid combination of arguments - got (...), but expected one of:", a TypeError)
                          r"\breceived an invalid combination of arguments\b|"
                          # (round 48) autograd's checks of how the program uses the graph (torch/csrc/autograd: "Trying to backward
                          # through the graph a second time (or directly access saved tensors after they have already been freed)",
                          # "element 0 of tensors does not require grad and does not have a grad_fn", "grad can be implicitly created
                          # only for scalar outputs"), and aten's check that an op's two operands agree ("expected mat1 and mat2 to have
                          # the same dtype, but got: c10::Half != float", "expected m1 and m2 to have the same dtype", "... to be on the
                          # same device"): the program's tensors or graph, the same on every machine
                          r"\bbackward through the graph a second time\b|\bdoes not require grad and does not have a grad_fn\b|"
                          r"\bgrad can be implicitly created only for (?:real )?scalar outputs\b|"
                          r"\b[Ee]xpected \w+ and \w+ to (?:have the same|be on the same)\b")
# Types worth a stop-time diagnosis even without their traceback (torch and CUDA runtime failures).
_HEADLESS_OTHER = frozenset({"RuntimeError", "AcceleratorError", "OutOfMemoryError", "DistBackendError", "DistStoreError",
                             "DistNetworkError", "MemoryError", "OSError", "SystemError"})
# Exception types that say the program itself is wrong when raised from a frame of its own.
USER_TYPES = frozenset(
    "ValueError KeyError TypeError IndexError AttributeError AssertionError NameError ZeroDivisionError "
    "FileNotFoundError ImportError ModuleNotFoundError NotImplementedError UnboundLocalError RecursionError "
    # the program's text does not parse (IndentationError and TabError are SyntaxErrors); a path it was given
    # that it may not read; a library told it was used wrongly (click's and wandb's UsageError)
    "SyntaxError IndentationError TabError PermissionError UsageError".split()
)


# (round 15) A library's own exception type whose name says the program's input or set-up is wrong, whichever library
# (json's JSONDecodeError, Lightning's MisconfigurationException, Hydra's InstantiationException, a ConfigError, a
# ValidationError): an uncaught one is the program's own report of its end, user_code (docs/design.md §9), as
# USER_TYPES are; and absl's status codes that say the caller asked wrong (XLA's "XlaRuntimeError: INVALID_ARGUMENT:
# ...", FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED), not RESOURCE_EXHAUSTED, INTERNAL or UNKNOWN.
# (round 48) and a linear-algebra library's error (torch.linalg's LinAlgError, printed "torch._C._LinAlgError: linalg.svd: The
# algorithm failed to converge ...", "... The solver failed because the input matrix is singular."; numpy.linalg's LinAlgError,
# a ValueError): the program's matrices are singular or ill-conditioned, its numbers, the same on every machine.
_USER_NAMED = re.compile(r"(?:Decode|Parse|Parser|Parsing|Config|Configuration|Misconfiguration|Instantiation|Validation|Schema|"
                         r"Argument|Usage|LinAlg)(?:Error|Exception)$")
_CALLER_STATUS = re.compile(r"^(?:INVALID_ARGUMENT|FAILED_PRECONDITION|OUT_OF_RANGE|UNIMPLEMENTED): ")
# (round 16) A library's subclass of one of USER_TYPES named for it (omegaconf's ConfigAttributeError and
# ConfigKeyError, a ConfigTypeError): the same report by its library, as USER_TYPES are.
_USER_SUFFIX = tuple(sorted(USER_TYPES))


def classify_nccl(text: str) -> str | None:
    """The NCCL error a line names (``ncclSystemError``, ``connection reset``, ...), or None."""
    if ("gloo" in text or "Gloo" in text) and (p := _PAIR_TRANSPORT.search(text)):
        return f"{PAIR_TRANSPORT}: {(p.group('pair') or 'connectFullMesh failed').strip()[:200]}"
    m = _NCCL_ERR.search(text)
    if not m:
        return None
    if m.group("name"):
        return m.group("name")
    if m.group("enum"):
        # the same ncclResult_t as ncclSystemError: one name downstream
        return "nccl" + "".join(w.capitalize() for w in m.group("enum").split("_")) + ("Error" if "INVALID" not in m.group("enum") else "")
    if m.group("reset"):
        return m.group("reset").lower()
    if m.group("where"):
        return f"NCCL error in {m.group('where')}: {m.group('why').strip()}".rstrip(": ")
    if m.group("why2"):
        return f"NCCL error: {m.group('why2').strip()}"
    if m.group("store"):
        return "store socket timeout"
    if m.group("why3"):
        return f"NCCL Error {m.group('code')}: {m.group('why3').strip()}"
    if m.group("ptext"):
        return f"ncclResult {m.group('pcode')}: {m.group('ptext').strip()}"
    if m.group("why4"):
        return f"NCCL failure {m.group('where2')}: {m.group('why4')}"
    if m.group("ntext"):
        return f"ncclResult {m.group('ncode')}: {m.group('ntext').strip()}"
    if m.group("call"):
        return f"{m.group('call')} failed: {m.group('calltext')}"
    if m.group("helpertext"):
        return f"NCCL error: {m.group('helpertext')}"
    if m.group("origin"):
        return f"raised from {m.group('origin')} (ProcessGroupNCCL)"
    if m.group("dup"):
        return "ncclInvalidUsage: duplicate GPU detected"
    if m.group("sock"):
        return m.group("sock")
    return "communicator aborted"


# ncclResult_t's results that say the caller used NCCL wrongly (nccl.h: ncclInvalidArgument "one argument has an
# invalid value", ncclInvalidUsage "the call to NCCL is incorrect. This is usually reflecting a programming error"),
# in every spelling classify_nccl returns: the name, ncclGetErrorString's text after "NCCL error in: ...", the enum,
# the numeric result (4, 5). Two ranks on one GPU, a wrong communicator: the job's launch or code, no machine's.
_NCCL_USAGE = re.compile(r"\bncclInvalid(?:Usage|Argument)\b|: invalid (?:usage|argument)\b|\bncclResult [45]:|\bNCCL Error [45]:")


# classify_nccl's name for a collective library's pair transport that failed (gloo's): the link between two ranks,
# an alert at most: which rank or network is at fault is in other lines (docs/design.md §1).
PAIR_TRANSPORT = "pair transport failed"


def nccl_fault(error: str) -> tuple[str, str]:
    """(fault, action) of an NCCL error by classify_nccl's name: the caller's misuse is ``user_code``
    (rollback, as a program's own error), a pair transport's failure an alert, every other result the
    collective's (``nccl_error``, reattempt)."""
    if _NCCL_USAGE.search(error):
        return "user_code", "rollback"
    if error.startswith(PAIR_TRANSPORT):
        return "nccl_error", "alert"
    return "nccl_error", "reattempt"


@dataclass(frozen=True)
class ExceptionLine:
    type: str
    message: str
    fault: str
    action: str
    severity: str
    error: str | None = None


def classify_headless(msg: str) -> ExceptionLine | None:
    """A bare ``Type: message`` line judged without frames: a CUDA / NCCL error by its text, a type
    that says the program is wrong (ValueError, KeyError, a shape mismatch) is user code, torch's
    runtime types ask for a stop-time diagnosis; any other type is too weak to call (None).

    (round 48) Python's base ``Exception`` itself opening the line (after a rank prefix the parser took off), as a
    traceback's last line prints it ("Exception: Dataset not found."): ``raise Exception(...)`` is a program's own
    idiom (libraries raise their own types), read after every CUDA, NCCL, errno, message and signal reading (DeepSpeed's
    loss-scale "Exception: Current loss scale already at minimum" is a rule's nan_loss, torch.multiprocessing's
    "Exception: process 3 terminated with signal SIGKILL" the signal's): user code. Not ``Exception:`` inside another
    program's record ("ERROR [..] Exception: bad file: ...", an ACPI "Exception: AE_NOT_FOUND"): no traceback prints there."""
    m = _HEADLESS.search(msg.strip())
    if not m:
        return None
    etype, message = m.group("type") or m.group("cause"), (m.group("msg") or m.group("cmsg") or "").strip()
    short = etype.rsplit(".", 1)[-1]
    text = f"{etype}: {message}"
    cuda = classify_cuda(text)
    if cuda:
        return ExceptionLine(etype, message, cuda[1], cuda[2], cuda[3], cuda[0])
    nccl = classify_nccl(text)
    if nccl:
        return ExceptionLine(etype, message, *nccl_fault(nccl), "error", nccl)
    verdict = judge(etype, message)
    if verdict is not None:
        return ExceptionLine(etype, message, verdict.fault, verdict.action, "error", verdict.errno)
    died = read_signal(message, "")
    if died:
        signal_data = died[0][1]
        return ExceptionLine(etype, message, signal_data["fault"], signal_data["action"], signal_data["severity"])
    if (short in USER_TYPES or short.endswith(_USER_SUFFIX) or (short == "RuntimeError" and _SHAPE_ERROR.search(message))
            or _USER_NAMED.search(short)
            or _CALLER_STATUS.match(message)
            or (etype == "Exception" and m.start("type") == 0)):
        return ExceptionLine(etype, message, "user_code", "rollback", "error")
    if short in _HEADLESS_OTHER:
        subject = read_subject(etype, message)
        if subject:
            return ExceptionLine(etype, message, subject[0], subject[1], "error")
        return ExceptionLine(etype, message, "unknown", "stop_time_diagnosis", "error")
    return None


# The C++ runtime's last words before abort(): "terminate called after throwing an instance of 'T'".
# (round 21) also std::terminate with no exception in flight ("terminate called without an active exception": a
# std::thread destroyed while joinable, a noexcept function's throw): the program's own abort, as the uncaught type's
_TERMINATE = re.compile(r"terminate called (?:after throwing an instance of '(?P<type>[^']+)'|without an active exception)")
# An exception's text alone, as str(OSError) prints it ("[Errno 28] No space left on device"), and a
# dotted exception type on a line of its own (torchelastic's "...rendezvous.api.RendezvousClosedError").
# (round 15) also after a program's own words and a colon ("checkpoint write retry: [Errno 28] No space left on device")
# (round 16) c10's enforce failure likewise ("Save model error: [enforce fail at inline_container.cc:595] . unexpected pos
# 64 vs 0": a torch.save the program caught and logged): its message is judged as the RuntimeError torch raised
_ERRNO_LINE = re.compile(r"^\s*(?:[^\[\]]{1,80}?: )?(?P<msg>\[Errno -?\d+\] \S.*|(?P<enforce>\[enforce fail at [\w./\-]+:\d+\] \S.*))$")
# (with the colon of an empty message too: torchelastic's "...errors.ChildFailedError:" before its table)
# (round 18) A program's own log of the error that ended it, the exception's text without its type ("ERROR - Training failed
# with error: indices should be either on cpu or on the same device as the indexed tensor"): judged only by the texts
# that say the program is wrong (_SHAPE_ERROR), as the RuntimeError's own line would be
# (round 20) also a program's own "<what> error: <text>" ("WARNING - Training batch error: full() received an invalid
# combination of arguments ..."), judged by the same texts only
_FAILED_WITH = re.compile(r"\b(?:failed with (?:error|exception)|[a-z]+ error): (?P<msg>\S.*)$")
_BARE_TYPE = re.compile(r"^(?P<type>(?:[a-z_]\w*\.)+[A-Z]\w*(?:Error|Exception)):?$")


def classify_terminate(msg: str) -> ExceptionLine | None:
    """A C++ exception nobody caught, by its type: c10d's DistBackendError is NCCL's; torch's
    c10::Error and CUDA error types say nothing alone (the ``what():`` line after it is judged);
    anything else (std::runtime_error, a library's own) is the program's native code, with the
    stop-time checks first, as a segfault is (parsing/signals.py)."""
    m = _TERMINATE.search(msg)
    if not m:
        return None
    etype = m.group("type") or "std::terminate"
    low = etype.lower()
    if "distbackenderror" in low or "nccl" in low:
        return ExceptionLine(etype, msg.strip(), "nccl_error", "reattempt", "error")
    if "outofmemory" in low:
        return ExceptionLine(etype, msg.strip(), "user_code", "rollback", "error")
    if low in ("c10::error", "c10::cudaerror", "c10::acceleratorerror"):
        return ExceptionLine(etype, msg.strip(), "unknown", "stop_time_diagnosis", "warn")
    return ExceptionLine(etype, msg.strip(), "user_code", "stop_time_diagnosis", "error")


def classify_bare(msg: str) -> ExceptionLine | None:
    """An errno report alone, judged by its errno (parsing/exceptions.toml), or a bare exception
    type the exceptions table knows; None otherwise (a bare type is too weak to call)."""
    text = msg.strip()
    m = _ERRNO_LINE.match(text)
    if m:
        etype = "RuntimeError" if m.group("enforce") else "OSError"
        verdict = judge(etype, m.group("msg"))
        if verdict is not None:
            return ExceptionLine(etype, m.group("msg"), verdict.fault, verdict.action, "error", verdict.errno)
        return None
    m = _FAILED_WITH.search(text)
    if m and _SHAPE_ERROR.search(m.group("msg")):
        return ExceptionLine("RuntimeError", m.group("msg"), "user_code", "rollback", "error")
    m = _BARE_TYPE.match(text)
    if m:
        verdict = judge(m.group("type"), "")
        if verdict is not None:
            return ExceptionLine(m.group("type"), "", verdict.fault, verdict.action, "error")
    return None
