"""``py-spy dump`` text for simulated ranks, in py-spy's own layout.

The shapes follow docs/design.md §5 (Megatron-style training under TP/PP/DP): a healthy step is in
forward/backward or the optimizer's gradient sync; under a hang the stuck machine's TP group is
in ``all_gather_into_tensor``, its pipeline peers wait in ``isend``/``irecv`` and everyone else
sits in the gradient all-reduce; a fail-slow rank is still computing while its peers wait. A
hang's culprit that never entered its group's collective (``data_wait``) is blocked on the host,
in the data loader, before the step's first tensor-parallel all_gather.

Two tools print them: the node agent's ``py-spy dump`` (:func:`py_spy_dump`) and the trainer
hook's faulthandler (:func:`faulthandler_dump`: every thread, innermost first, full paths, the
hook's own listener thread as the current one), from the same frames.
"""

from __future__ import annotations

# Innermost frame first, as py-spy prints them: (function, file, line).
Frame = tuple[str, str, int]

_TOP = [
    ("forward_backward_pipelining_without_interleaving", "megatron/core/pipeline_parallel/schedules.py", 1405),
    ("train_step", "megatron/training/training.py", 739),
    ("train", "megatron/training/training.py", 1255),
    ("pretrain", "megatron/training/training.py", 352),
    ("<module>", "pretrain_gpt.py", 412),
]

ALL_GATHER: list[Frame] = [
    ("all_gather_into_tensor", "torch/distributed/distributed_c10d.py", 3121),
    ("wrapper", "torch/distributed/c10d_logger.py", 83),
    ("_gather_along_first_dim", "megatron/core/tensor_parallel/mappings.py", 254),
    ("forward", "megatron/core/tensor_parallel/mappings.py", 411),
    ("apply", "torch/autograd/function.py", 575),
    ("forward", "megatron/core/tensor_parallel/layers.py", 621),
    ("_call_impl", "torch/nn/modules/module.py", 1747),
    ("forward", "megatron/core/transformer/attention.py", 418),
    ("forward_step", "megatron/core/pipeline_parallel/schedules.py", 275),
]


def _p2p(op: str) -> list[Frame]:
    return [
        (op, "torch/distributed/distributed_c10d.py", 2069 if op == "isend" else 2114),
        ("_batched_p2p_ops", "megatron/core/pipeline_parallel/p2p_communication.py", 147),
        ("_communicate", "megatron/core/pipeline_parallel/p2p_communication.py", 327),
        ("recv_forward" if op == "irecv" else "send_forward", "megatron/core/pipeline_parallel/p2p_communication.py", 412),
    ]


GRAD_SYNC: list[Frame] = [
    ("all_reduce", "torch/distributed/distributed_c10d.py", 2501),
    ("wrapper", "torch/distributed/c10d_logger.py", 83),
    ("start_grad_sync", "megatron/core/distributed/param_and_grad_buffer.py", 373),
    ("finish_grad_sync", "megatron/core/distributed/distributed_data_parallel.py", 395),
    ("finalize_model_grads", "megatron/core/distributed/finalize_model_grads.py", 214),
]

COMPUTE: list[Frame] = [
    ("_flash_attn_forward", "flash_attn/flash_attn_interface.py", 96),
    ("forward", "flash_attn/flash_attn_interface.py", 839),
    ("apply", "torch/autograd/function.py", 575),
    ("forward", "megatron/core/transformer/dot_product_attention.py", 182),
    ("forward", "megatron/core/transformer/attention.py", 405),
    ("forward_step", "megatron/core/pipeline_parallel/schedules.py", 275),
]

DATA_WAIT: list[Frame] = [
    ("select", "selectors.py", 416),
    ("wait", "multiprocessing/connection.py", 947),
    ("_poll", "multiprocessing/connection.py", 440),
    ("poll", "multiprocessing/connection.py", 257),
    ("get", "multiprocessing/queues.py", 113),
    ("_try_get_data", "torch/utils/data/dataloader.py", 1133),
    ("_get_data", "torch/utils/data/dataloader.py", 1294),
    ("_next_data", "torch/utils/data/dataloader.py", 1332),
    ("__next__", "torch/utils/data/dataloader.py", 701),
    ("get_batch", "pretrain_gpt.py", 94),
    ("forward_step", "pretrain_gpt.py", 155),
    ("forward_step", "megatron/core/pipeline_parallel/schedules.py", 275),
]

_IDLE_THREADS = [
    ("Thread-2 (_pin_memory_loop)", [("wait", "threading.py", 324), ("get", "queue.py", 180),
                                     ("_pin_memory_loop", "torch/utils/data/_utils/pin_memory.py", 54)]),
    ("Thread-1", [("wait", "threading.py", 324), ("run", "torch/_inductor/compile_worker/subproc_pool.py", 301)]),
]


def frames_for(state: str) -> list[Frame]:
    """The main thread's frames for a state: all_gather, isend, irecv, grad_sync, compute, data_wait."""
    if state == "all_gather":
        return ALL_GATHER + _TOP
    if state in ("isend", "irecv"):
        return _p2p(state) + _TOP
    if state == "grad_sync":
        return GRAD_SYNC + _TOP
    if state == "compute":
        return COMPUTE + _TOP
    if state == "data_wait":
        return DATA_WAIT + _TOP
    raise ValueError(f"unknown stack state {state!r}")


def py_spy_dump(pid: int, state: str, thread_base: int = 0x7F3A5C1FF740) -> str:
    """One process's ``py-spy dump --pid PID`` output."""
    out = [f"Process {pid}: /usr/bin/python3 -u pretrain_gpt.py --tensor-model-parallel-size 8 --use-distributed-optimizer",
           "Python v3.10.12 (/usr/bin/python3.10)", ""]
    # py-spy calls a thread blocked in a system call (the data loader's select) idle.
    status = "idle" if state == "data_wait" else "active"
    out.append(f'Thread {thread_base + pid * 0x1000:#X} ({status}): "MainThread"'.replace("0X", "0x"))
    out += [f"    {fn} ({file}:{line})" for fn, file, line in frames_for(state)]
    for i, (name, frames) in enumerate(_IDLE_THREADS):
        out.append(f'Thread {thread_base + pid * 0x1000 + (i + 1) * 0x10000:#X} (idle): "{name}"'.replace("0X", "0x"))
        out += [f"    {fn} ({file}:{line})" for fn, file, line in frames]
    return "\n".join(out) + "\n"


# Where the files of the frames above live on a training machine, for faulthandler's full paths.
_SITE = "/usr/local/lib/python3.10/dist-packages/"
_STDLIB = "/usr/lib/python3.10/"
_WORKDIR = "/workspace/Megatron-LM/"
_LISTENER = [("faulthandler_dump", "faultlens/trainer_hooks/hook.py", 52),
             ("publish_stacks", "faultlens/trainer_hooks/hook.py", 165),
             ("_on_command", "faultlens/trainer_hooks/hook.py", 152)]
# A thread started by `threading` bottoms out in these (faulthandler prints them; a reader tells the
# main thread by their absence).
_BOOTSTRAP = [("run", "threading.py", 953), ("_bootstrap_inner", "threading.py", 1016), ("_bootstrap", "threading.py", 973)]


def _full_path(file: str) -> str:
    if "/" not in file and file.endswith(".py") and file[0].islower() and file not in ("pretrain_gpt.py",):
        return _STDLIB + file
    if file.startswith(("torch/", "megatron/", "flash_attn/", "faultlens/")):
        return _SITE + file
    if file.startswith("multiprocessing/"):
        return _STDLIB + file
    return _WORKDIR + file


def faulthandler_dump(pid: int, state: str, thread_base: int = 0x7F3A5C1FF740) -> str:
    """What the trainer hook's ``faulthandler.dump_traceback(all_threads=True)`` prints for a rank:
    the listener thread that dumps (the current one), the idle helpers, the training thread last."""

    def thread(ident: int, frames: list[Frame], current: bool = False) -> list[str]:
        head = f"{'Current thread' if current else 'Thread'} 0x{ident:016x} (most recent call first):"
        return [head] + [f'  File "{_full_path(file)}", line {line} in {fn}' for fn, file, line in frames] + [""]

    base = thread_base + pid * 0x1000
    out = thread(base + 0x40000, _LISTENER + _BOOTSTRAP, current=True)
    for i, (_, frames) in enumerate(_IDLE_THREADS):
        out += thread(base + (i + 1) * 0x10000, frames + _BOOTSTRAP)
    out += thread(base, frames_for(state))
    return "\n".join(out).rstrip() + "\n"
