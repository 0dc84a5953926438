"""What a generic runtime exception's own words say failed, when its type says nothing (issue 54).

torch, its extensions and the accelerator runtimes raise one generic type for everything (``RuntimeError``, a
c10 ``AcceleratorError``), so the exception table (parsing/exceptions.toml) keeps such a line ``unknown`` and
asks for the stop-time checks. Where the type or the message itself names the component that failed, a person
reads that component's class instead, whichever library raised it:

- the type is the collective backend's own (torch's ``DistBackendError``, raised only by a process group's
  backend): ``nccl_error``, as the traceback path and ``terminate called after throwing ... DistBackendError``
  already read it;
- the device's allocator could not allocate (``CUDA allocation failed``, a runtime's ``tensor_allocate ...
  Allocation Failure``): the job asked the device for more than it has, ``user_code`` as CUDA's out of memory is
  (docs/design.md §9: a GPU allocator's OOM at any level is ``user_code``);
- the library refuses what the program asked of it (``... is not supported``, ``does not work on multi GPU
  setups``, ``not implemented``): the request fails on every machine alike, ``user_code`` as a build without
  code for the device is;
- (issue 54 round 42) a serving engine short of memory for what its own memory settings allow (SGLang's ``Not
  enough memory. Please try to increase --mem-fraction-static.``, vLLM's KV-cache checks naming
  ``gpu_memory_utilization`` or ``max_model_len``): the engine was configured past the device, ``user_code`` as
  the device's allocator failing is; and a serving engine's core process that died starting (vLLM's ``Engine
  core initialization failed. See root cause above.``, SGLang's ``Failed to initialize scheduler rank N``):
  the program's own death in its output, ``user_code``, an alert (the root cause printed before it decides
  what is done; docs/design.md §9).

Only an exception already read ``unknown`` is consulted (parsing/errors.py, parsing/trainer_tracebacks.py), so no
line becomes an event that was none: a reading changes a class, never whether a line fires. An errno, a CUDA or
NCCL error and the exception table's messages are read before it and keep their word.

Pure functions over one exception's type and message.
"""

from __future__ import annotations

import re

# torch.distributed's error for a backend's failure (c10d's C10_THROW_ERROR(DistBackendError, ...)); its store's and
# network's siblings are the exception table's (DistStoreError, DistNetworkError).
_BACKEND_TYPES = frozenset({"DistBackendError"})
# The device's (or a tensor's) memory allocation failing: the allocator's subject, not the host's (the host's
# allocator, ENOMEM and shared memory are the exception table's host_oom, read before this).
# (round 43) also a framework's allocation for a device kernel's own buffers, its output, input or workspace (MindSpore's
# "Malloc for kernel output failed, Memory isn't enough, node:Default/Cast-op446"): a kernel's buffers are the device's
_DEVICE_ALLOC = re.compile(
    r"(?i)(?<![a-z])(?:CUDA|GPU|device|tensor)[ _](?:memory[ _])?alloc(?:ation|ate|ator)?\b[^\n]{0,40}?\bfail(?:ed|ure|s)?\b"
    r"|\b(?:malloc|alloc(?:ate|ation)?)\b (?:memory )?for (?:the )?kernel(?:'s)? (?:output|input|workspace)s?\b[^\n]{0,20}?\bfail(?:ed|ure|s)?\b"
)
# A library's refusal of the request: what the program asked is not supported or not implemented by it.
# (round 46) also "Unsupported" opening the message or a clause of it, and "is unsupported": a C++ library's own check of the
# request (FlashInfer's "Error in function 'BatchPrefillWithPagedKVCacheDispatched' at .../prefill.cuh:3201: Unsupported
# max_mma_kv: 0", include/flashinfer/exception.h's "Error in function '<f>' at <file>:<line>: <message>")
_UNSUPPORTED = re.compile(
    r"\b(?:is|are) not (?:currently |yet )?(?:supported|implemented)\b|\bdoes not (?:currently |yet )?(?:work|support)\b"
    r"|(?:^|[:;.]\s+)Unsupported\b|\b(?:is|are) (?:currently )?unsupported\b"
)

# (round 42) A memory shortage whose message names a serving engine's memory setting, the share of the device it may
# take or the sizes that fill it (vLLM's gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens,
# kv_cache_memory, num_gpu_blocks, swap_space, cpu_offload_gb; SGLang's --mem-fraction-static, max_total_tokens,
# max_running_requests, chunked_prefill_size, cuda_graph_max_bs), as an option or a keyword, dashes or underscores.
_MEMORY_SHORT = re.compile(r"(?i)\b(?:not enough|insufficient|no available|out of) (?:\w+ ){0,2}memory\b|\bmemory is not enough\b")
_ENGINE_MEMORY_SETTING = re.compile(
    r"(?i)(?<![\w-])(?:--)?(?:gpu[_-]memory[_-]utilization|mem[_-]fraction[_-]static|max[_-]model[_-]len|max[_-]num[_-]seqs"
    r"|max[_-]num[_-]batched[_-]tokens|kv[_-]cache[_-]memory(?:[_-]bytes)?|num[_-]gpu[_-]blocks(?:[_-]override)?|swap[_-]space"
    r"|cpu[_-]offload[_-]gb|max[_-]total[_-]tokens|max[_-]running[_-]requests|chunked[_-]prefill[_-]size|cuda[_-]graph[_-]max[_-]bs)\b"
)
# (round 42) A serving engine's core process that died while starting, in the words its front end raises: vLLM's
# wait_for_engine_startup ("Engine core initialization failed. See root cause above. Failed core proc(s): {...}"),
# SGLang's launcher ("Failed to initialize scheduler rank 0"). Not vLLM's client that sees its engine gone ("Engine
# core proc EngineCore_DP0 died unexpectedly, shutting down client."): it prints that at every interpreter exit too.
_ENGINE_START_FAILED = re.compile(r"\bEngine core initialization failed\b|\bFailed to initialize scheduler rank \d+\b")


# (round 48) torch's ExceptionWrapper re-raising, in the main process, what the program's own code raised where torch ran it
# for it (torch/_utils.py: "Caught <Type> in replica <n> on device <d>." for DataParallel's replicas of the program's module,
# "Caught <Type> in DataLoader worker process <n>." for its Dataset's code in a worker): the program's model or data code
# raised it, user_code as its own traceback's last line is; the original traceback's lines follow and keep their own readings
# (a CUDA error or an errno there is its own event). The wrapper's OOM is CUDA's (parsing/cuda_errors.py reads it first).
_WRAPPED = re.compile(r"^Caught (?:[A-Za-z_]\w*\.)*[A-Za-z_]\w* in (?:replica \d+ on device \d+|DataLoader worker process \d+)\.?\s*$")
# (round 48) A library's refusal that tells the program which of its own settings to change ("Unable to sample before the end
# of the first episode. We recommend choosing a value for learning_starts that is greater than ...", "Please set
# `max_steps` ...", "try increasing the value of num_workers"): the program's configuration, the same on every machine.
_ADVISED_SETTING = re.compile(
    r"(?i)\b(?:we recommend|please|try|you (?:should|must|need to)) (?:choosing|choose|setting|set|passing|pass|increasing|increase"
    r"|decreasing|decrease|reducing|reduce|lowering|lower|raising|changing|change) (?:a |the )?(?:value (?:for|of) )?`?[a-z_][a-z0-9_.]*_[a-z0-9_]+`?\b"
)

# (round 48, whole_logs/fresh2's leftover) A name the program's configuration gave that its model does not hold (accelerate's
# FSDP auto-wrap: "ValueError: Could not find the transformer layer class <Name> in the model."; "module <name> not found in
# the model", "Target modules {...} not found in the base model"): the job's configuration, user_code, whichever library's
# frames raised it (a launcher's frames are all site-packages, so the traceback's own frames cannot say it is the program's).
_NOT_IN_MODEL = re.compile(
    r"(?i)\b(?:could not|couldn't|cannot|can't|unable to|failed to) find\b[^\n]{0,100}?\bin (?:the |your |this )?(?:base )?model\b"
    r"|\bnot (?:be )?found in (?:the |your |this )?(?:base )?model\b"
)


def read_subject(etype: str | None, message: str) -> tuple[str, str, str] | None:
    """(fault, action, why) of a generic exception by the component its type or message names, or None."""
    if (etype or "").rsplit(".", 1)[-1] in _BACKEND_TYPES:
        return "nccl_error", "reattempt", "the collective backend's error type"
    if _DEVICE_ALLOC.search(message):
        return "user_code", "rollback", "the device's allocator could not allocate"
    if _UNSUPPORTED.search(message):
        return "user_code", "rollback", "the library does not support the request"
    if _MEMORY_SHORT.search(message) and _ENGINE_MEMORY_SETTING.search(message):
        return "user_code", "rollback", "the serving engine's memory settings exceed the device"
    if _ENGINE_START_FAILED.search(message):
        return "user_code", "alert", "a serving engine's core process died starting"
    if _NOT_IN_MODEL.search(message):
        return "user_code", "rollback", "a name the job's configuration gave is not in its model"
    if _WRAPPED.match(message):
        return "user_code", "rollback", "torch re-raised what the program's model or dataset code raised in a replica or a worker"
    if _ADVISED_SETTING.search(message):
        return "user_code", "rollback", "the library tells the program which of its settings to change"
    return None
