"""What a CUDA (or HIP, Level Zero) failure named in a message means: its class, action and severity.

Pure; the CUDA half of parsing/errors.py's readings of an error's text (split from it in issue 54's round 34, behaviour
the same), shared by the trainer log parser's single lines, its tracebacks and NCCL's lines.
"""

from __future__ import annotations

import re

_CUDA_ERR = re.compile(
    # ROCm's HIP runtime mirrors CUDA's: torch on ROCm prints "HIP error: <text>", hipError* names
    # darknet's check_error prints cudaGetErrorString as "CUDA Error: <text>" ("CUDA Error Prev:" for the error before)
    r"(?:CUDA|HIP) (?:runtime )?(?:error|Error(?: Prev)?): (?P<err>[^.\n]+)"
    # the device's memory exhausted as NCCL's CUDACHECK prints it ("Cuda failure 'out of memory'", "Cuda failure 2
    # 'out of memory'") and as TensorFlow's status of a GPU call ("Non-OK-status: GpuLaunchKernel(...) status:
    # Internal: out of memory"): the program's OOM in whichever words (round 15)
    r"|(?P<oomcall>Cuda failure (?:2 )?'out of memory'|Non-OK-status: Gpu\w+\(.*\) status: \w+: out of memory)"
    # torch < 1.0's THC check ("THCudaCheck FAIL file=.../THCStorage.cu line=66 error=2 : out of memory") and a glog
    # CHECK on a cudaError_t (Caffe's CUDA_CHECK "Check failed: error == cudaSuccess (74 vs. 0)  misaligned address",
    # MXNet's "Check failed: err == cudaSuccess (2 vs. 0) Name: mxnet_generic_kernel ErrStr:out of memory"): by the code and its text
    r"|THCudaCheck FAIL file=\S+ line=\d+ error=(?P<thcode>\d+) : (?P<thtext>[^\n]+)"
    r"|Check failed: \(?\w+\)? == cudaSuccess \((?P<ckcode>\d+) vs\. 0\)\s+(?:Name: \S+ ErrStr: ?)?(?P<cktext>[^\n]+)"
    # (round 48) a program's own check that prints the cudaError_t's number in parentheses (OpenMM's CUDA platform: "Error
    # synchronizing on event for CCMA: CUDA error (700) at .../CudaIntegrationUtilities.cpp:736"): by the code, as a CHECK's
    r"|\bCUDA error \((?P<pcode>\d+)\)"
    # a device-side assert as the kernel prints it (CUDA's __assert_fail on the device: "<file>.cu:40: <func>: block: [0,0,0],
    # thread: [49,0,0] Assertion `t >= 0 && t < n_classes` failed."): the program indexed wrong, as "device-side assert triggered"
    r"|(?P<devassert>\.cuh?:\d+: .*\bblock: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion)"
    # a host-side assert in a program's CUDA checking function (darknet's "./src/cuda.c:36: check_error: Assertion `0' failed."),
    # printed after the CUDA error it checked
    r"|(?P<hostassert>\bcuda\w*\.(?:c|cc|cpp|cu):\d+: \w*check\w*: Assertion .* failed)"
    # HIP's driver API names (TF/XLA's ROCm stream executor: "failed to allocate 127.99TiB (...) from device: HIP_ERROR_OutOfMemory")
    r"|(?P<hiperr>\bHIP_ERROR_[A-Za-z]+)"
    r"|(?P<status>(?:CUBLAS|CUDNN|CUSOLVER|CUFFT|CUSPARSE|CURAND)_STATUS_\w+"
    # (round 46) ROCm's math libraries name their results as CUDA's do: hipBLAS / hipBLASLt / hipSOLVER / hipFFT / hipSPARSE /
    # hipRAND's HIPBLAS_STATUS_* (the hip*_status_t enums), rocBLAS's rocblas_status_* (rocblas_status enum) and MIOpen's
    # miopenStatus* (miopenStatus_t: miopenStatusUnknownError, miopenStatusInternalError, miopenStatusAllocFailed, ...), the
    # last ROCm's cuDNN ("XlaRuntimeError: INTERNAL: Failed to enqueue convolution: miopenStatusUnknownError"); never their success
    r"|\b(?:HIPBLAS|HIPBLASLT|HIPSOLVER|HIPFFT|HIPSPARSE|HIPRAND)_STATUS_(?!SUCCESS\b)\w+|\brocblas_status_(?!success\b)\w+"
    r"|\bmiopenStatus(?!Success\b)[A-Z]\w*)"
    # (round 18) not in torch's pointer to the documentation under the error ("Search for `cudaErrorLaunchFailure' in
    # https://docs.nvidia.com/... for more information."): the error's own line before it is the record
    r"|(?P<cuerr>(?<!Search for `)\b(?:cuda|hip)Error\w+)"
    # the device allocator's OOM in every torch backend's words (CUDA, ROCm's HIP, Intel's XPU, Apple's MPS):
    # torch/csrc and c10's OutOfMemoryError messages "<DEVICE> out of memory. Tried to allocate ..."
    # torch's own type for it (torch.cuda.OutOfMemoryError, torch.OutOfMemoryError since 2.5), also when the message is a
    # wrapper's (DataParallel's ExceptionWrapper: "Caught OutOfMemoryError in replica 0 on device 0.")
    # (MPS's allocator says "MPS backend out of memory (MPS allocated: ...)", MPSAllocator.mm); Vulkan's result for the
    # device's memory exhausted, in the C enum's and Vulkan-Hpp's spelling (VK_ERROR_OUT_OF_DEVICE_MEMORY,
    # "vk::Device::allocateMemory: ErrorOutOfDeviceMemory", ggml's Vulkan backend): the same OOM in the API's own name
    r"|(?P<oom>(?:CUDA|HIP|XPU|MPS|NPU)(?: backend)? out of memory|\btorch\.(?:cuda\.)?OutOfMemoryError\b(?!: (?:CUDA|HIP|XPU|MPS|NPU) out of memory)"
    # (round 18) the wrapper's message names the type without its module ("Caught OutOfMemoryError in replica 0 on device 0."):
    # a replica on a device is DataParallel's, so the device's OOM
    r"|\bCaught (?:\w+\.)*OutOfMemoryError in replica \d+ on device \d+"
    # (round 24) c10's caching allocator recording the same failure at its warning level before it raises ("[W810 ...
    # CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on device 1 while trying to allocate N bytes")
    r"|\bVK_ERROR_OUT_OF_DEVICE_MEMORY\b|\bErrorOutOfDeviceMemory\b|\bmemory allocation failed with OOM on device \d+)"
    # Intel GPUs' runtimes name their results as CUDA's do: Level Zero's ze_result_t (oneapi-src/level-zero
    # include/ze_api.h: ZE_RESULT_ERROR_DEVICE_LOST "device hung, reset, was removed", ..._DEVICE_REQUIRES_RESET,
    # ..._OUT_OF_DEVICE_MEMORY) and the Unified Runtime's ur_result_t under SYCL / torch XPU (ur_api.h, same names)
    r"|(?P<ze>\b(?:ZE|UR)_RESULT_ERROR_[A-Z_]+)"
    # Ascend NPUs under torch_npu: a device task that failed, reported at the stream's synchronisation as
    # CUDA's are ("ACL stream synchronize failed, error code:507035", torch_npu's AT_ERROR after
    # aclrtSynchronizeStream; CANN's own "Synchronize stream failed. error code is 507015")
    # (round 43) and torch_npu's wrapper of a synchronize call that failed ("NPU function error:
    # c10_npu::acl::AclrtSynchronizeStreamWithTimeout(copy_stream), error code is 507035", its device-wide
    # AclrtSynchronizeDeviceWithTimeout too): the device's work failed or never finished, whatever the code
    r"|(?P<acl>ACL stream synchronize failed(?:, error code: ?\d+)?|Synchronize stream failed\. error code is \d+"
    r"|NPU function error: \S*?Synchronize(?:Stream|Device)\S*, error code is \d+"
    # CANN's runtime report of a device task that failed ("EZ9999  Kernel task happen error, retCode=0x26, [aicore exception]")
    r"|Kernel task happen error, retCode=0x[0-9a-fA-F]+(?:, \[[\w ]+\])?)"
    # the CUDA driver API's error names, torch < 1.5's "cuda runtime error (802) : system not yet initialized",
    # cuda-gdb's "CUDA Exception: Warp Illegal Address", a checked call's "cudaGetDeviceProperties returned 802"
    r"|(?P<drv>\bCUDA_ERROR_[A-Z_]+(?:: [^\n]+)?)"
    r"|cuda runtime error \((?P<rtcode>\d+)\) : (?P<rttext>.+?)(?: at \S+:\d+)?$"
    r"|CUDA Exception: (?P<gdbx>[^\n]+)"
    # c10's origin line under a CUDA failure ("Exception raised from c10_cuda_check_implementation at
    # ../c10/cuda/CUDAException.cpp:44"): a function of torch's CUDA layer, its first line lost
    r"|Exception raised from (?P<cudaorigin>\w+) at \S*(?:c10/cuda|ATen/cuda|ATen/native/cuda|c10/cuda/impl)/\w+\.\w+:\d+"
    # NCCL's CUDACHECK naming a code that says the device or its driver failed, not the call's use:
    # 999 unknown, 46 busy or unavailable, 700/719 illegal address / launch failure, 702 launch timed out
    # ("Cuda failure 999 'unknown error'"); 'invalid argument', 'out of memory' stay NCCL's (nccl_lines.py).
    # (round 26) 205/206, the driver unable to map or unmap a buffer object for the call (NCCL's allocator's
    # "Cuda failure 205 'mapping of buffer object failed'"): the driver's failure, as the CUDA samples' text is read
    r"|(?P<cf>Cuda failure (?:999|46|70[02]|719|20[56])\b(?: '[^']*')?)"
    # (round 18) the CUDA samples' and nccl-tests' check macro, with the file and line ("Cuda failure p2pBandwidthLatencyTest.cu:189:
    # 'mapping of buffer object failed'"): cudaGetErrorString's text, read as every CUDA error's is
    r"|Cuda failure \S+\.(?:cuh?|cc|cpp|c|h):\d+:? '(?P<cfsample>[^']+)'"
    r"|(?P<call>\bcu(?:da)?[A-Z]\w+) returned (?P<callrc>[1-9]\d*)\b"
    # a runtime API call its wrapper reports failed by name (hipSYCL / AdaptiveCpp: "hip_queue: hipMemsetAsync() failed
    # (error code = HIP:1)"; the same for cuda*): the call's error, as a checked call's return code
    r"|(?P<apicall>\b(?:cuda|hip)[A-Z]\w*\(\) failed(?: \(error code = \w+:\d+\))?)"
    # the runtime's texts for the other sticky failures of a kernel on the device (cudaGetErrorString of 714-716, 718), as
    # NCCL's CUDACHECK ("Cuda failure 'an illegal instruction was encountered'") and c10's C10_CUDA_CHECK_WARN print them
    r"|(?P<text>uncorrectable ECC error encountered|unspecified launch failure|an illegal memory access was encountered|CUDA driver error[^.]*|"
    r"an illegal instruction was encountered|misaligned address|hardware stack error|invalid program counter|"
    r"cu(?:blas|dnn|fft|sparse|solver|rand) runtime error|No CUDA GPUs are available|CUDA driver initialization failed|"
    # the runtime's texts for a driver or device not ready (cudaGetErrorString of 802, 803, 46, 702)
    r"system not yet initialized|system has unsupported display driver / cuda driver combination|"
    r"all CUDA-capable devices are busy or unavailable|the launch timed out and was terminated|"
    # (round 17) a build whose module lacks the kernel it launches (cudaErrorSymbolNotFound, 500), as NCCL's CUDACHECK
    # prints it ("Cuda failure 'named symbol not found'"): the program's build, as no kernel image is (docs/design.md §9)
    r"named symbol not found|no kernel image is available for execution on the device|"
    # (round 20) cudaErrorInvalidDevice (101): the program asked for a device number its process does not see (its
    # allocation's CUDA_VISIBLE_DEVICES), as NCCL's CUDACHECK prints it ("Cuda failure 101 'invalid device ordinal'")
    r"invalid device ordinal|"
    # (round 24) cudaErrorInvalidDeviceFunction (98), a kernel not compiled for this device's architecture, in any program's
    # report of it (the CUDA samples' "(error code invalid device function)", NCCL's CUDACHECK): the build's (§9)
    r"invalid device function|"
    # (round 48) torch's check that the driver can run the CUDA it was built for (c10/cuda: "The NVIDIA driver on your system
    # is too old (found version 11040). Please update your GPU driver ..."): the CUDA runtime cannot start on this driver,
    # cuda_error (the lead's settlement; the runtime's own "CUDA driver version is insufficient for CUDA runtime version"
    # keeps its gpu_lost rows); cuDNN finding no algorithm or engine it can run for the op (aten's cudnn Conv: "Unable to
    # find a valid cuDNN algorithm to run convolution"; the cuDNN v8 frontend's "GET was unable to find an engine to execute
    # this computation", "FIND was unable to find an engine ..."): the library's failure on the device, cuda_error
    r"The NVIDIA driver on your system is too old|Unable to find a valid cuDNN algorithm\b|\b(?:GET|FIND) was unable to find an engine\b)"
)
# cudaError_t codes a checked call prints as a number whose reading is not cuda_error's.
_RUNTIME_CODES = {2: "out of memory", 100: "no CUDA-capable device is detected", 214: "uncorrectable ECC error encountered",
                  802: "system not yet initialized"}
# The runtime's name for a device number the process does not have (101, "invalid device ordinal"), spaces and
# underscores dropped: not cudaErrorInvalidDevicePointer (17), a pointer the program passed wrong.
_INVALID_DEVICE_NAME = re.compile(r"errorinvaliddevice(?!pointer)")
# A GPU the process cannot see or reach: the device gone from the bus or the driver's grip
# (docs/design.md: "Unable to determine the device handle" is gpu_lost too).
_NO_DEVICE = re.compile(r"no cuda gpus are available|no (?:cuda|rocm)-capable device is detected|cuda driver initialization failed|"
                        r"(?:cuda|hip)errornodevice|cuda error no device|gpu is lost|cudaerrordevicesunavailable")


def classify_cuda(text: str) -> tuple[str, str, str, str] | None:
    """(error, fault, action, severity) of a CUDA failure named in ``text``, or None."""
    m = _CUDA_ERR.search(text)
    if not m:
        return None
    if m.group("callrc"):
        code = int(m.group("callrc"))
        error = f"{m.group('call')} returned {code}" + (f" ({_RUNTIME_CODES[code]})" if code in _RUNTIME_CODES else "")
    elif m.group("rttext"):
        error = f"cuda runtime error ({m.group('rtcode')}): {m.group('rttext')}"
    elif m.group("thtext") or m.group("cktext") is not None or m.group("pcode"):
        code = int(m.group("thcode") or m.group("ckcode") or m.group("pcode"))
        error = f"cudaError {code}: " + (m.group("thtext") or m.group("cktext") or _RUNTIME_CODES.get(code, "")).strip()
        if code in (59, 710):  # cudaErrorAssert (59 before CUDA 10, 710 after): a device-side assert
            error += " (device-side assert)"
    elif m.group("devassert"):
        error = "device-side assert"
    else:
        error = (m.group("err") or m.group("status") or m.group("cuerr") or m.group("oom") or m.group("ze") or m.group("acl") or m.group("drv")
                 or m.group("hostassert") or m.group("hiperr") or m.group("gdbx")
                 or m.group("cf") or m.group("cfsample") or m.group("oomcall") or m.group("apicall") or m.group("text") or f"CUDA failure raised from {m.group('cudaorigin')}").strip()
    low = error.lower().replace("_", " ")
    if "ecc" in low:
        return error, "gpu_memory", "evict", "fatal"
    if _NO_DEVICE.search(low):
        return error, "gpu_lost", "stop_time_diagnosis", "error"
    if ("no kernel image is available" in low or "unsupported ptx version" in low or "nobinaryforgpu" in low.replace(" ", "") or "nokernelimagefordevice" in low
            or "named symbol not found" in low or "invalid device ordinal" in low or "invalid device function" in low
            or _INVALID_DEVICE_NAME.search(low.replace(" ", ""))):
        # the build has no code for this GPU's architecture: the program's environment, not the GPU (HIP's name for it:
        # hipErrorNoBinaryForGpu, "Unable to find code object for all current devices!"); a device number the allocation
        # does not hold fails on every machine the same way (docs/design.md §9); "invalid device function" is CUDA's and HIP's
        # word for a kernel not compiled for this device's architecture (round 24); the name in any spelling (round 33: CUDA_ERROR_NO_BINARY_FOR_GPU)
        # (round 34) "invalid device ordinal" by the error's name in any API's spelling (cudaErrorInvalidDevice,
        # CUDA_ERROR_INVALID_DEVICE, hipErrorInvalidDevice): the name is what a wrapper prints before or instead of the text
        return error, "user_code", "rollback", "error"
    if "requires reset" in low:
        return error, "gpu_reset_required", "stop_time_diagnosis", "error"
    if "device lost" in low:
        # Level Zero / UR: the device hung, was reset or removed (the same as CUDA's no device left)
        return error, "gpu_lost", "stop_time_diagnosis", "error"
    if "nvlink" in low:
        # cudaErrorNvlinkUncorrectable ("uncorrectable NVLink error detected during the execution"):
        # the link's, not the program's; the kernel's Xid of that link decides an eviction.
        return error, "nvlink", "stop_time_diagnosis", "error"
    if "device-side assert" in low or m.group("oom") or "out of memory" in low or "out of device memory" in low or "outofmemory" in low or "errormemoryallocation" in low:
        # An index out of range or a batch too big: the program's fault, not the GPU's (the runtime's name cudaErrorMemoryAllocation, round 33).
        return error, "user_code", "rollback", "error"
    return error, "cuda_error", "stop_time_diagnosis", "error"
