"""What the text of an error means: a CUDA failure, an NCCL failure, an exception line.

Pure functions over one message, shared by the trainer log parser's single lines, its tracebacks
and the exception lines whose traceback went elsewhere (:func:`classify_headless`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from faultlens.parsing.exceptions import judge
from faultlens.parsing.signals import read_signal

_NCCL_ERR = re.compile(
    r"\b(?P<name>ncclRemoteError|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclInvalidUsage|ncclInvalidArgument)\b"
    # gloo says "Connection closed by peer [ip]:port" when the rank across a pair died
    r"|(?P<reset>Connection reset by peer|Connection closed by (?:remote )?peer|Broken pipe)"
    r"|NCCL error in: (?P<where>\S+?),? (?P<why>[^,]*)"
    # torch >= 2.3's watchdog: "NCCL error: remote process exited or there was a network error"
    r"|NCCL error: (?P<why2>[^,.]+)"
    # the c10d store a rendezvous and NCCL's unique id go through: its socket gave up
    r"|(?P<store>Socket Timeout)"
    r"|(?P<aborted>NCCL communicator was aborted)"
)
_CUDA_ERR = re.compile(
    r"CUDA error: (?P<err>[^.\n]+)"
    r"|(?P<status>(?:CUBLAS|CUDNN|CUSOLVER|CUFFT|CUSPARSE|CURAND)_STATUS_\w+)"
    r"|(?P<cuerr>\bcudaError\w+)"
    r"|(?P<oom>CUDA out of memory)"
    r"|(?P<text>uncorrectable ECC error encountered|unspecified launch failure|an illegal memory access was encountered|CUDA driver error[^.]*|"
    r"cu(?:blas|dnn|fft|sparse|solver|rand) runtime error|No CUDA GPUs are available|CUDA driver initialization failed)"
)
# A GPU the process cannot see or reach: the device gone from the bus or the driver's grip
# (docs/design.md: "Unable to determine the device handle" is gpu_lost too).
_NO_DEVICE = re.compile(r"no cuda gpus are available|no cuda-capable device is detected|cuda driver initialization failed|"
                        r"cudaerrornodevice|cuda_error_no_device|gpu is lost|cudaerrordevicesunavailable")

# A bare exception line: a (dotted) type ending in Error / Exception, a colon and a message; after
# whatever prefix a logger or a launcher put before it (a clock, "[rank3]:", "ERROR - ", a task id).
_HEADLESS = re.compile(r"(?:^|(?<=[\s\]\)>|:]))(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): (?P<msg>\S.*)$")
_SHAPE_ERROR = re.compile(r"shapes? cannot be multiplied|size mismatch|must match the size|Expected (?:input|tensor|all tensors|\d)|"
                          r"expected scalar type|dimension out of range|index out of range|mismatch between collectives")
# Types worth a stop-time diagnosis even without their traceback (torch and CUDA runtime failures).
_HEADLESS_OTHER = frozenset({"RuntimeError", "AcceleratorError", "OutOfMemoryError", "DistBackendError", "DistStoreError",
                             "DistNetworkError", "MemoryError", "OSError", "SystemError"})
# Exception types that say the program itself is wrong when raised from a frame of its own.
USER_TYPES = frozenset(
    "ValueError KeyError TypeError IndexError AttributeError AssertionError NameError ZeroDivisionError "
    "FileNotFoundError ImportError ModuleNotFoundError NotImplementedError UnboundLocalError RecursionError".split()
)



def classify_cuda(text: str) -> tuple[str, str, str, str] | None:
    """(error, fault, action, severity) of a CUDA failure named in ``text``, or None."""
    m = _CUDA_ERR.search(text)
    if not m:
        return None
    error = (m.group("err") or m.group("status") or m.group("cuerr") or m.group("oom") or m.group("text")).strip()
    low = error.lower()
    if "ecc" in low:
        return error, "gpu_memory", "evict", "fatal"
    if _NO_DEVICE.search(low):
        return error, "gpu_lost", "stop_time_diagnosis", "error"
    if "no kernel image is available" in low or "unsupported ptx version" in low:
        # the build has no code for this GPU's architecture: the program's environment, not the GPU
        return error, "user_code", "rollback", "error"
    if "nvlink" in low:
        # cudaErrorNvlinkUncorrectable ("uncorrectable NVLink error detected during the execution"):
        # the link's, not the program's; the kernel's Xid of that link decides an eviction.
        return error, "nvlink", "stop_time_diagnosis", "error"
    if "device-side assert" in low or m.group("oom") or "out of memory" in low:
        # An index out of range or a batch too big: the program's fault, not the GPU's.
        return error, "user_code", "rollback", "error"
    return error, "cuda_error", "stop_time_diagnosis", "error"


def classify_nccl(text: str) -> str | None:
    """The NCCL error a line names (``ncclSystemError``, ``connection reset``, ...), or None."""
    m = _NCCL_ERR.search(text)
    if not m:
        return None
    if m.group("name"):
        return m.group("name")
    if m.group("reset"):
        return m.group("reset").lower()
    if m.group("where"):
        return f"NCCL error in {m.group('where')}: {m.group('why').strip()}".rstrip(": ")
    if m.group("why2"):
        return f"NCCL error: {m.group('why2').strip()}"
    if m.group("store"):
        return "store socket timeout"
    return "communicator aborted"


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
    runtime types ask for a stop-time diagnosis; any other type is too weak to call (None)."""
    m = _HEADLESS.search(msg.strip())
    if not m:
        return None
    etype, message = m.group("type"), m.group("msg").strip()
    short = etype.rsplit(".", 1)[-1]
    text = f"{etype}: {message}"
    cuda = classify_cuda(text)
    if cuda:
        return ExceptionLine(etype, message, cuda[1], cuda[2], cuda[3], cuda[0])
    nccl = classify_nccl(text)
    if nccl:
        return ExceptionLine(etype, message, "nccl_error", "reattempt", "error", nccl)
    verdict = judge(etype, message)
    if verdict is not None:
        return ExceptionLine(etype, message, verdict.fault, verdict.action, "error", verdict.errno)
    died = read_signal(message, "")
    if died:
        signal_data = died[0][1]
        return ExceptionLine(etype, message, signal_data["fault"], signal_data["action"], signal_data["severity"])
    if short in USER_TYPES or (short == "RuntimeError" and _SHAPE_ERROR.search(message)):
        return ExceptionLine(etype, message, "user_code", "rollback", "error")
    if short in _HEADLESS_OTHER:
        return ExceptionLine(etype, message, "unknown", "stop_time_diagnosis", "error")
    return None
