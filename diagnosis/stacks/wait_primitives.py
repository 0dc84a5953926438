"""Which frames are a rank waiting on its peers, and what a rank that is not waiting is doing.

A hung job's ranks fall in two kinds (issue 19): *victims* blocked in a communication primitive
(a collective, a point-to-point send/recv, a barrier, an NCCL/gloo wait, a CUDA stream sync
behind a collective) and *suspects* anywhere else (compute, data loading, a lock, I/O, a
checkpoint write). This module holds the one table of primitives — torch.distributed, NCCL,
gloo, Megatron and DeepSpeed frame names, as py-spy (also ``--native``) and faulthandler print
them — and reads one thread's frames into a :class:`RankActivity`.

A frame's file is the short path of :mod:`diagnosis.stacks.stack_dump` (``torch/distributed/...``),
or a shared library's name for a native frame (``libnccl.so.2``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from faultlens.diagnosis.stacks.stack_dump import Frame

COLLECTIVE, SEND, RECV, SENDRECV, BARRIER, SYNC = "collective", "send", "recv", "sendrecv", "barrier", "sync"


@dataclass(frozen=True, slots=True)
class Primitive:
    kind: str  # COLLECTIVE, SEND, RECV, SENDRECV (p2p whose direction the name does not say), BARRIER, SYNC
    op: str  # all_reduce, recv, ncclGroupEnd, ...
    library: str  # torch.distributed, megatron, deepspeed, nccl, gloo, cuda
    direction: str | None = None  # p2p: "forward" (towards the next stage) or "backward", when the name says
    axis: str | None = None  # the parallel axis the library uses this call for, when it says (tp, pp, dp)


# --- the table -------------------------------------------------------------------------------------
_C10D_COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "_all_gather_base",
    "all_gather_coalesced", "all_gather_object", "reduce_scatter", "reduce_scatter_tensor",
    "_reduce_scatter_base", "reduce", "broadcast", "broadcast_object_list", "all_to_all",
    "all_to_all_single", "gather", "gather_object", "scatter", "scatter_object_list", "wait_tensor",
    "_coalescing_manager", "wait",
    # torch 2.13: reduce_scatter_tensor / all_gather_into_tensor forward to these (the innermost frame)
    "reduce_scatter_single", "all_gather_single",
})
_C10D_BARRIERS = frozenset({"barrier", "monitored_barrier", "_store_based_barrier", "init_process_group",
                            "new_group", "_new_group_with_tag", "rendezvous"})
_C10D_P2P = {"send": SEND, "isend": SEND, "send_object_list": SEND, "recv": RECV, "irecv": RECV,
             "recv_object_list": RECV, "batch_isend_irecv": SENDRECV}

# Megatron's pipeline p2p (megatron/core/pipeline_parallel/p2p_communication.py, and the older
# megatron/p2p_communication.py): the name says which neighbour the stage waits on.
_MEGATRON_P2P = {
    "recv_forward": (RECV, "forward"), "recv_backward": (RECV, "backward"),
    "send_forward": (SEND, "forward"), "send_backward": (SEND, "backward"),
    "send_forward_recv_backward": (SENDRECV, "backward"), "send_backward_recv_forward": (SENDRECV, "forward"),
    "send_forward_recv_forward": (SENDRECV, "forward"), "send_backward_recv_backward": (SENDRECV, "backward"),
    "_communicate": (SENDRECV, None), "_batched_p2p_ops": (SENDRECV, None), "_p2p_ops": (SENDRECV, None),
}
# DeepSpeed's pipeline engine (deepspeed/runtime/pipe/engine.py) and its p2p (deepspeed/runtime/pipe/p2p.py).
_DEEPSPEED_PIPE = {
    "_exec_send_activations": (SEND, "forward"), "_exec_recv_activations": (RECV, "forward"),
    "_exec_send_grads": (SEND, "backward"), "_exec_recv_grads": (RECV, "backward"),
}
_DEEPSPEED_P2P = {"send": SEND, "isend": SEND, "recv": RECV, "irecv": RECV, "wait": SENDRECV}

# Callers that say which group a collective runs on (Megatron, DeepSpeed and common names).
_AXIS_HINTS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"grad_sync|allreduce_gradients|reduce_gradients|reduce_grads|sync_grads|allreduce_bucket|"
                r"average_tensor|reduce_ipg_grads|_reduce_scatter_grads|allreduce_and_copy"), "dp"),
    (re.compile(r"embedding_grads|allreduce_tied_weight"), "pp"),
)
_AXIS_FILE_HINTS: tuple[tuple[str, str], ...] = (
    ("tensor_parallel/", "tp"), ("megatron/core/distributed/", "dp"), ("deepspeed/runtime/zero/", "dp"),
)

_NATIVE_FILE = re.compile(r"\.so(\.\d+)*$|^\?\?$|^$")
_NCCL = re.compile(r"^nccl[A-Z]\w*|^(?:c10d::)?ProcessGroupNCCL|ncclKernel")
_GLOO = re.compile(r"^gloo::")
_C10D_NATIVE = re.compile(r"^c10d::(?:ProcessGroup\w*::\S*(?:wait|Wait|synchronize)|TCPStore::(?:wait|get|doWait|doGet)|"
                          r"\w*Work\w*::wait)")
_CUDA_SYNC = re.compile(r"^cu(?:da)?(?:Stream|Device|Event|Ctx)Synchronize")
_TORCH_SYNC = {("synchronize", "torch/cuda/__init__.py"), ("synchronize", "torch/cuda/streams.py")}


def _under(file: str, package: str) -> str | None:
    """``file`` relative to ``package`` ("megatron/") when it lies in it: a checkout outside
    site-packages keeps its absolute path (/workspace/Megatron-LM/megatron/core/...)."""
    if file.startswith(package):
        return file
    cut = file.find("/" + package)
    return file[cut + 1:] if cut >= 0 else None


def primitive_of(frame: Frame) -> Primitive | None:
    """The communication primitive ``frame`` is, or None."""
    fn = _base(frame.function)
    file = (_under(frame.file, "torch/distributed/") or _under(frame.file, "megatron/")
            or _under(frame.file, "deepspeed/") or frame.file)
    if file.startswith("torch/distributed/"):
        if file.endswith("distributed_c10d.py") or file.endswith("_functional_collectives.py"):
            if fn in _C10D_P2P:
                return Primitive(_C10D_P2P[fn], fn, "torch.distributed")
            if fn in _C10D_BARRIERS:
                return Primitive(BARRIER, fn, "torch.distributed")
            if fn in _C10D_COLLECTIVES or file.endswith("_functional_collectives.py"):
                return Primitive(COLLECTIVE, fn, "torch.distributed")
        if file.endswith("rendezvous.py") or fn in ("_store_based_barrier", "monitored_barrier"):
            return Primitive(BARRIER, fn, "torch.distributed")
        return None
    if file.endswith("p2p_communication.py") and (file.startswith("megatron/") or file == "p2p_communication.py"):
        kind, direction = _MEGATRON_P2P.get(fn, (None, None))
        return Primitive(kind, fn, "megatron", direction, "pp") if kind else None
    if file.startswith("megatron/") and file.endswith("tensor_parallel/mappings.py") and fn.startswith(
            ("_reduce", "_gather", "_all_to_all", "all_to_all", "gather_from", "reduce_from", "reduce_scatter")):
        return Primitive(COLLECTIVE, fn, "megatron", axis="tp")
    if file.startswith("megatron/") and fn in ("finish_grad_sync", "start_grad_sync"):
        return Primitive(COLLECTIVE, fn, "megatron", axis="dp")
    if file.startswith("deepspeed/"):
        if file.startswith("deepspeed/comm/"):
            if fn in _C10D_P2P:
                return Primitive(_C10D_P2P[fn], fn, "deepspeed")
            if "barrier" in fn:
                return Primitive(BARRIER, fn, "deepspeed")
            if fn.startswith("_") or fn in ("is_initialized", "get_rank", "get_world_size", "log_summary"):
                return None  # bookkeeping, no wait
            return Primitive(COLLECTIVE, fn, "deepspeed")
        if file.endswith("runtime/pipe/p2p.py") and fn in _DEEPSPEED_P2P:
            return Primitive(_DEEPSPEED_P2P[fn], fn, "deepspeed", axis="pp")
        if file.endswith("runtime/pipe/engine.py") and fn in _DEEPSPEED_PIPE:
            kind, direction = _DEEPSPEED_PIPE[fn]
            return Primitive(kind, fn, "deepspeed", direction, "pp")
        return None
    if not is_native(frame):
        return None
    if _NCCL.search(fn) or "libnccl" in file:
        return Primitive(COLLECTIVE, fn, "nccl")
    if _GLOO.search(fn):
        return Primitive(COLLECTIVE, fn, "gloo")
    if _C10D_NATIVE.search(fn):
        return Primitive(BARRIER if "TCPStore" in fn else COLLECTIVE, fn, "torch.distributed")
    if _CUDA_SYNC.search(fn):
        return Primitive(SYNC, fn, "cuda")
    return None


def is_native(frame: Frame) -> bool:
    """A C/C++ frame (py-spy --native): a shared library, an address, or a C++ qualified name."""
    return bool(_NATIVE_FILE.search(frame.file)) or frame.function.startswith("0x") or "::" in frame.function


def axis_hint(frames: Sequence[Frame]) -> str | None:
    """The parallel axis the callers of a collective name (grad sync → dp, tensor_parallel → tp)."""
    for frame in frames:
        for pattern, axis in _AXIS_HINTS:
            if pattern.search(frame.function):
                return axis
        for fragment, axis in _AXIS_FILE_HINTS:
            if fragment in frame.file:
                return axis
    return None


def direction_hint(frames: Sequence[Frame]) -> str | None:
    """forward / backward from the nearest caller that names one and not both (forward_step, backward_step)."""
    for frame in frames:
        name = frame.function.lower()
        fwd, bwd = "forward" in name, "backward" in name
        if fwd != bwd:
            return "forward" if fwd else "backward"
    return None


# --- suspects: what a rank outside any primitive is doing -------------------------------------------
# Contexts are looked for anywhere in the stack, innermost first (a checkpoint save that is
# writing is a checkpoint write, not I/O); the innermost frames then tell a lock or I/O apart.
_CONTEXTS: tuple[tuple[str, re.Pattern, re.Pattern], ...] = (
    ("checkpoint write", re.compile(r"^(save_checkpoint\w*|_save_checkpoint|save_state_dict|_write_item|write_data)$"),
     re.compile(r"^torch/serialization\.py|^torch/distributed/checkpoint/|checkpointing\.py|checkpoint_engine")),
    ("data loading", re.compile(r"^(__getitem__|__getitems__|_next_data|_get_data|_try_get_data|collate\w*|"
                                r"get_batch\w*|load_batch\w*|next_batch)$"),
     re.compile(r"^torch/utils/data/|dataloader|data_loader|webdataset|indexed_dataset|/datasets?/")),
)
_LOCK = re.compile(r"^(acquire|_acquire_restore|__lll_lock_wait\w*|pthread_mutex_lock|pthread_rwlock_\w*lock|"
                   r"_wait_for_tstate_lock)$")
_IO_FUNCTION = re.compile(r"^(read|readinto|readline|write|flush|open|recv_into|recvfrom|connect|urlopen|select|"
                          r"poll|epoll_wait|getaddrinfo|fsync|__libc_read|__libc_write|__open\w*)$")
_IO_FILE = re.compile(r"^(socket|ssl|selectors|subprocess|http/client|shutil)\.py$|^(urllib|requests|boto\w*|fsspec|s3fs)/")


@dataclass(frozen=True, slots=True)
class RankActivity:
    """One rank's training thread read as waiting (a victim) or not (a suspect)."""

    waiting: bool
    primitive: Primitive | None  # what it waits in (None for a suspect)
    frame: str  # the deciding frame, "function (file:line)"
    activity: str  # "waiting in all_reduce", "compute", "data loading", ...
    axis: str | None = None  # collectives: the group's axis when the callers say
    direction: str | None = None  # p2p: forward / backward when the frames say
    call_site: tuple[tuple[str, str], ...] = ()  # primitive frame and its callers: ranks in one collective share it


def _where(frame: Frame) -> str:
    return f"{frame.function} ({frame.file}{'' if frame.line is None else f':{frame.line}'})"


def _base(function: str) -> str:
    return function if "::" in function else function.rsplit(".", 1)[-1]


def _primitive_or_sync(frame: Frame) -> Primitive | None:
    prim = primitive_of(frame)
    if prim is None and (_base(frame.function), frame.file) in _TORCH_SYNC:
        return Primitive(SYNC, "synchronize", "torch.cuda")
    return prim


def read_activity(frames: Sequence[Frame], call_site_depth: int = 4) -> RankActivity | None:
    """Read a thread's frames (innermost first); None when there is none to read.

    Native frames inside a primitive (pthread_cond_wait under gloo's waitRecv) are passed over;
    the first Python frame that is no primitive ends the search: the rank is running its own code.
    A CUDA synchronize is a wait only behind a collective (a primitive further out in the stack):
    on its own it is a GPU that does not finish its work, i.e. a suspect.
    """
    if not frames:
        return None
    for i, frame in enumerate(frames):
        prim = _primitive_or_sync(frame)
        if prim is not None and prim.kind == SYNC:
            behind = next(((j, p) for j, p in ((j, primitive_of(f)) for j, f in enumerate(frames[i + 1:], i + 1))
                           if p is not None and p.kind != SYNC), None)
            if behind is None:
                return RankActivity(False, None, _where(frame), "GPU work that does not finish (a stream sync outside communication)")
            i, prim = behind
            frame = frames[i]
        if prim is not None and is_native(frame):
            # gloo's waitRecv says "waiting"; the torch or Megatron call further out says in what.
            outer = next(((j, p) for j, p in ((j, primitive_of(f)) for j, f in enumerate(frames[i + 1:], i + 1))
                          if p is not None and p.kind != SYNC and not is_native(frames[j])), None)
            if outer is not None:
                i, prim = outer
                frame = frames[i]
        if prim is not None:
            callers = frames[i + 1:]
            direction = prim.direction
            if prim.kind in (SEND, RECV, SENDRECV) and direction is None:
                # torch's isend under Megatron's send_forward: the outer helper names kind and side;
                # plain torch recv under a user's backward_step: the caller's name does.
                helper = next((p for p in map(primitive_of, callers[:8]) if p is not None and p.direction), None)
                if helper is not None:
                    prim = Primitive(helper.kind, prim.op, prim.library, helper.direction, helper.axis or prim.axis)
                    direction = helper.direction
                else:
                    direction = direction_hint(callers)
            axis = prim.axis or (axis_hint(callers) if prim.kind == COLLECTIVE else None)
            site = tuple(f.key for f in frames[i:i + call_site_depth])
            return RankActivity(True, prim, _where(frame), f"waiting in {prim.op}", axis, direction, site)
        if is_native(frame):
            continue
        return RankActivity(False, None, _where(frame), _activity(frames, i))
    return RankActivity(False, None, _where(frames[0]), _activity(frames, len(frames) - 1, native_only=True))


def _activity(frames: Sequence[Frame], first_python: int, native_only: bool = False) -> str:
    for frame in frames[first_python:]:
        fn = _base(frame.function)
        for name, fn_pattern, file_pattern in _CONTEXTS:
            if fn_pattern.search(fn) or file_pattern.search(frame.file):
                return name
    for frame in frames[:first_python + 1]:
        fn = _base(frame.function).split("@", 1)[0]
        if _LOCK.search(fn) or (fn == "wait" and frame.file.endswith("threading.py")):
            return "lock"
        if _IO_FUNCTION.search(fn) or _IO_FILE.search(frame.file):
            return "I/O"
    return "native code outside communication" if native_only else "compute"
