"""The table of communication primitives and the wait-for chains (diagnosis.stacks.wait_primitives, wait_chain).

Frames are written as py-spy (also --native) and faulthandler print them for torch.distributed,
Megatron-LM, DeepSpeed, NCCL and gloo; the real-dump cases are in test_hang_stacks.py.
"""

from __future__ import annotations

import pytest

from bench.testbed.stack_samples import GRAD_SYNC, PP_RECV, PP_SEND, SLOW_COMPUTE, STUCK_ALL_GATHER, grid, pyspy_dump
from faultlens.diagnosis.stacks.stack_dump import Frame, parse_dump, training_thread
from faultlens.diagnosis.stacks.wait_chain import follow_waits
from faultlens.diagnosis.stacks.wait_primitives import BARRIER, COLLECTIVE, RECV, SEND, SENDRECV, read_activity

C10D = "torch/distributed/distributed_c10d.py"


def frames(*spec: tuple[str, str]) -> tuple[Frame, ...]:
    return tuple(Frame(fn, file, 1) for fn, file in spec)


def read(*spec: tuple[str, str]):
    return read_activity(frames(*spec))


# --- the table ------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec,kind,op", [
    ([("all_reduce", C10D), ("wrapper", "torch/distributed/c10d_logger.py"), ("train", "train.py")], COLLECTIVE, "all_reduce"),
    ([("recv", C10D), ("backward_step", "train.py")], RECV, "recv"),
    ([("isend", C10D), ("_batched_p2p_ops", "megatron/core/pipeline_parallel/p2p_communication.py"),
      ("_communicate", "megatron/core/pipeline_parallel/p2p_communication.py"),
      ("send_forward", "megatron/core/pipeline_parallel/p2p_communication.py")], SEND, "isend"),
    ([("barrier", C10D), ("save_checkpoint", "megatron/training/checkpointing.py")], BARRIER, "barrier"),
    ([("_communicate", "/workspace/Megatron-LM/megatron/core/pipeline_parallel/p2p_communication.py"),
      ("send_forward_recv_backward", "/workspace/Megatron-LM/megatron/core/pipeline_parallel/p2p_communication.py")],
     SENDRECV, "_communicate"),
    ([("finish_grad_sync", "megatron/core/distributed/distributed_data_parallel.py")], COLLECTIVE, "finish_grad_sync"),
    ([("all_reduce", "deepspeed/comm/comm.py"), ("allreduce_bucket", "deepspeed/runtime/zero/stage_1_and_2.py")],
     COLLECTIVE, "all_reduce"),
    ([("_exec_recv_grads", "deepspeed/runtime/pipe/engine.py"), ("_exec_schedule", "deepspeed/runtime/pipe/engine.py")],
     RECV, "_exec_recv_grads"),
    # py-spy --native: native frames inside the primitive are passed over.
    ([("pthread_cond_wait@@GLIBC_2.3.2", "libc.so.6"), ("gloo::transport::tcp::UnboundBuffer::waitRecv", "libtorch_cpu.so"),
      ("recv", C10D), ("forward_step", "train.py")], RECV, "recv"),
    ([("ncclGroupEnd", "libnccl.so.2"), ("c10d::ProcessGroupNCCL::collective", "libtorch_cuda.so"),
      ("train_step", "train.py")], COLLECTIVE, "ncclGroupEnd"),
    ([("c10d::TCPStore::doWait", "libtorch_cpu.so"), ("_store_based_barrier", C10D)], BARRIER, "_store_based_barrier"),
])
def test_primitives_make_a_rank_a_victim(spec, kind, op):
    act = read(*spec)
    assert act.waiting and act.primitive.kind == kind and act.primitive.op == op
    assert act.activity == f"waiting in {op}"


def test_p2p_direction_comes_from_the_name_or_the_caller():
    assert read(("recv", C10D), ("forward_step", "train.py")).direction == "forward"
    assert read(("recv", C10D), ("backward_step", "train.py")).direction == "backward"
    # Megatron's send_forward_recv_backward names both: its receiving half decides.
    act = read(("irecv", C10D), ("_communicate", "megatron/core/pipeline_parallel/p2p_communication.py"),
               ("send_forward_recv_backward", "megatron/core/pipeline_parallel/p2p_communication.py"))
    assert (act.primitive.kind, act.direction) == (SENDRECV, "backward")
    assert read(("recv", C10D), ("step", "train.py")).direction is None


def test_collective_axis_comes_from_the_callers():
    assert training_thread(parse_dump(pyspy_dump(GRAD_SYNC))) is not None
    grad = read_activity(training_thread(parse_dump(pyspy_dump(GRAD_SYNC))).frames)
    gather = read_activity(training_thread(parse_dump(pyspy_dump(STUCK_ALL_GATHER))).frames)
    assert (grad.axis, gather.axis) == ("dp", "tp")
    assert read(("all_reduce", C10D), ("step", "train.py")).axis is None


def test_cuda_sync_is_a_wait_only_behind_a_collective():
    behind = read(("cudaStreamSynchronize", "libcudart.so.12"), ("c10d::ProcessGroupNCCL::WorkNCCL::synchronize", "libtorch_cuda.so"),
                  ("all_reduce", C10D), ("step", "train.py"))
    assert behind.waiting and behind.primitive.op == "all_reduce"
    alone = read(("cudaStreamSynchronize", "libcudart.so.12"), ("synchronize", "torch/cuda/__init__.py"),
                 ("forward", "model.py"))
    assert not alone.waiting and "stream sync outside communication" in alone.activity


@pytest.mark.parametrize("spec,activity", [
    ([("forward", "model.py"), ("_call_impl", "torch/nn/modules/module.py")], "compute"),
    ([("linear", "torch/nn/functional.py"), ("forward", "megatron/core/tensor_parallel/layers.py")], "compute"),
    ([("wait", "threading.py"), ("get", "multiprocessing/queues.py"), ("_try_get_data", "torch/utils/data/dataloader.py"),
      ("_next_data", "torch/utils/data/dataloader.py"), ("train", "train.py")], "data loading"),
    ([("__getitem__", "my_dataset.py"), ("fetch", "torch/utils/data/_utils/fetch.py")], "data loading"),
    ([("write", "torch/serialization.py"), ("save", "torch/serialization.py"),
      ("save_checkpoint", "megatron/training/checkpointing.py")], "checkpoint write"),
    ([("acquire", "filelock/_api.py"), ("train", "train.py")], "lock"),
    ([("__lll_lock_wait", "libc.so.6"), ("step", "train.py")], "lock"),
    ([("readinto", "socket.py"), ("fetch_config", "train.py")], "I/O"),
])
def test_suspects_say_what_they_are_doing(spec, activity):
    act = read(*spec)
    assert not act.waiting and act.primitive is None and act.activity == activity


def test_a_user_frame_inside_nothing_is_a_suspect_even_when_torch_distributed_is_further_out():
    # The user function runs; it is not waiting in the all_reduce its caller will make later.
    act = read(("compute_loss", "train.py"), ("all_reduce", C10D))
    assert not act.waiting and act.frame == "compute_loss (train.py:1)"


# --- the chains ---------------------------------------------------------------------------------
def _acts(topo, spec_of):
    out = {}
    for p in topo.ranks:
        out[p.rank] = read_activity(training_thread(parse_dump(pyspy_dump(spec_of(p)))).frames)
    return out


def test_recv_follows_the_pipeline_to_the_stage_that_computes():
    topo = grid(2, 4, tp=1, pp=4, dp=2)  # ranks 0-3 pipeline dp0, 4-7 dp1
    culprit = 5  # stage 1 of dp1
    fwd_recv = [("recv", C10D, 10), ("forward_step", "train.py", 5), ("main", "train.py", 1)]
    grad = [("all_reduce", C10D, 10), ("finish_grad_sync", "train.py", 5), ("main", "train.py", 1)]
    bwd_recv = [("recv", C10D, 20), ("backward_step", "train.py", 6), ("main", "train.py", 1)]
    compute = [("forward", "model.py", 3), ("forward_step", "train.py", 5), ("main", "train.py", 1)]

    def spec(p):
        if p.rank == culprit:
            return compute
        if p.dp == 1:
            return fwd_recv if p.pp > 1 else bwd_recv
        return grad

    chains = follow_waits(_acts(topo, spec), topo)
    assert chains.suspects == (culprit,)
    assert chains.edges[7] == (6,) and chains.edges[6] == (5,)  # recv (forward): the previous stage
    assert chains.edges[1] == (5,)  # grad sync on dp: the member that never arrived
    assert chains.edges[4] == (5,) and chains.dead_ends == ()  # recv (backward): the next stage
    assert chains.edges[3] == (7,)  # the healthy pipeline's last stage waits on its DP peer
    assert chains.chain_to(culprit) == (3, 7, 6, 5)  # the longest way in
    assert chains.reach([culprit]) == set(range(8)) - {culprit}


def test_ranks_without_a_dump_end_chains_as_unknown():
    topo = grid(2, 2, tp=1, pp=2, dp=2)
    acts = _acts(topo, lambda p: [("all_reduce", C10D, 1), ("finish_grad_sync", "t.py", 1)])
    del acts[3]
    chains = follow_waits(acts, topo)
    assert chains.unknown_ends == (3,) and chains.suspects == () and chains.edges[1] == (3,)


def test_every_rank_in_the_same_collective_waits_on_nobody():
    topo = grid(2, 2, tp=2, pp=1, dp=2)
    chains = follow_waits(_acts(topo, lambda p: [("all_reduce", C10D, 1), ("step", "t.py", 1)]), topo)
    assert chains.suspects == () and chains.dead_ends == (0, 1, 2, 3) and not any(chains.edges.values())


def test_fig7_has_no_rank_outside_communication():
    topo = grid(4, 2, tp=2, pp=2, dp=2)
    stuck = 3

    def spec(p):
        if p.rank == stuck:
            return STUCK_ALL_GATHER
        if p.tp == 1 and p.dp == 0:
            return PP_SEND if p.pp == 0 else PP_RECV
        return GRAD_SYNC

    chains = follow_waits(_acts(topo, spec), topo)
    assert chains.suspects == () and chains.unknown_ends == ()
    assert 2 in chains.dead_ends  # the stuck rank's TP peer went on to the gradient sync


def test_a_compute_rank_nobody_waits_on_is_no_suspect():
    topo = grid(2, 2, tp=1, pp=2, dp=2)
    # Rank 0 computes; the only waiter is rank 3 (recv forward from rank 2, which also computes).
    specs = {0: SLOW_COMPUTE, 1: SLOW_COMPUTE, 2: SLOW_COMPUTE,
             3: [("recv", C10D, 1), ("forward_step", "t.py", 1)]}
    chains = follow_waits(_acts(topo, lambda p: specs[p.rank]), topo)
    assert chains.suspects == (2,) and chains.unwaited == (0, 1)


def test_barriers_of_unknown_scope_at_two_call_sites_each_wait_on_the_other_half():
    # Half the job in a barrier under checkpointing, half in one under evaluation: each half waits
    # on the ranks that are not in its own barrier (each call site's stragglers, not the first one's).
    topo = grid(2, 2, tp=1, pp=1, dp=4)
    ckpt = [("barrier", C10D, 1), ("save_checkpoint", "megatron/training/checkpointing.py", 1)]
    evaluate = [("barrier", C10D, 2), ("evaluate", "megatron/training/training.py", 1)]
    acts = _acts(topo, lambda p: ckpt if p.rank < 2 else evaluate)
    assert {a.primitive.kind for a in acts.values()} == {BARRIER} and {a.axis for a in acts.values()} == {None}
    chains = follow_waits(acts, topo)
    assert chains.edges == {0: (2, 3), 1: (2, 3), 2: (0, 1), 3: (0, 1)}
    assert chains.dead_ends == () and chains.suspects == ()
