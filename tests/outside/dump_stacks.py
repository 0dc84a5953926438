"""The stacks the ranks of tests/outside/dump_shapes.py's hung jobs are caught in, innermost frame first
(as both py-spy forms list them): frame names, files and lines of the libraries' public sources
(DeepSpeed's ZeRO-3 coordinator, torch FSDP and torch.save, Megatron's pipeline p2p, JAX's pjit).
"""

from __future__ import annotations

from tests.outside.dump_formats import Stack

_ZERO3_GATHER: Stack = [
    ("all_gather_into_tensor", "torch/distributed/distributed_c10d.py", 2897),
    ("wrapper", "torch/distributed/c10d_logger.py", 83),
    ("all_gather_into_tensor", "deepspeed/comm/torch.py", 219),
    ("all_gather_into_tensor", "deepspeed/comm/comm.py", 305),
    ("_dist_allgather_fn", "deepspeed/runtime/zero/partition_parameters.py", 95),
    ("all_gather_coalesced", "deepspeed/runtime/zero/partition_parameters.py", 1311),
    ("__all_gather_params_", "deepspeed/runtime/zero/partitioned_param_coordinator.py", 463),
    ("fetch_sub_module", "deepspeed/runtime/zero/partitioned_param_coordinator.py", 311),
    ("pre_sub_module_forward_function", "deepspeed/runtime/zero/parameter_offload.py", 477),
    ("_pre_forward_module_hook", "deepspeed/runtime/zero/parameter_offload.py", 341),
    ("_call_impl", "torch/nn/modules/module.py", 1568),
    ("forward", "transformers/models/llama/modeling_llama.py", 1164),
    ("forward", "deepspeed/runtime/engine.py", 1899),
    ("train_epoch", "train_zero3.py", 142),
    ("main", "train_zero3.py", 210),
    ("<module>", "train_zero3.py", 230),
]
_LOADER_WAIT: Stack = [
    ("wait", "threading.py", 331),
    ("get", "multiprocessing/queues.py", 113),
    ("_try_get_data", "torch/utils/data/dataloader.py", 1133),
    ("_get_data", "torch/utils/data/dataloader.py", 1294),
    ("_next_data", "torch/utils/data/dataloader.py", 1332),
    ("__next__", "torch/utils/data/dataloader.py", 631),
    ("train_epoch", "train_zero3.py", 131),
    ("main", "train_zero3.py", 210),
    ("<module>", "train_zero3.py", 230),
]
_FSDP_BARRIER: Stack = [
    ("barrier", "torch/distributed/distributed_c10d.py", 3936),
    ("wrapper", "torch/distributed/c10d_logger.py", 83),
    ("save_checkpoint", "fsdp_train.py", 88),
    ("train", "fsdp_train.py", 171),
    ("main", "fsdp_train.py", 199),
    ("<module>", "fsdp_train.py", 214),
]
_CKPT_WRITE: Stack = [
    ("write_record", "torch/serialization.py", 582),
    ("_save", "torch/serialization.py", 881),
    ("save", "torch/serialization.py", 629),
    ("save_checkpoint", "fsdp_train.py", 84),
    ("train", "fsdp_train.py", 171),
    ("main", "fsdp_train.py", 199),
    ("<module>", "fsdp_train.py", 214),
]
_MEGATRON_TAIL: Stack = [
    ("forward_backward_pipelining_without_interleaving", "megatron/core/pipeline_parallel/schedules.py", 1312),
    ("train_step", "megatron/training/training.py", 750),
    ("train", "megatron/training/training.py", 1180),
    ("pretrain", "megatron/training/training.py", 361),
    ("<module>", "pretrain_gpt.py", 240),
]
_MEGATRON_RECV_FWD: Stack = [
    ("wait", "torch/distributed/distributed_c10d.py", 2040),
    ("_communicate", "megatron/core/pipeline_parallel/p2p_communication.py", 382),
    ("recv_forward", "megatron/core/pipeline_parallel/p2p_communication.py", 412),
    ("recv_forward", "megatron/core/pipeline_parallel/schedules.py", 1040),
] + _MEGATRON_TAIL
_MEGATRON_RECV_BWD: Stack = [
    ("wait", "torch/distributed/distributed_c10d.py", 2040),
    ("_communicate", "megatron/core/pipeline_parallel/p2p_communication.py", 382),
    ("send_forward_recv_backward", "megatron/core/pipeline_parallel/p2p_communication.py", 497),
    ("send_forward_recv_backward", "megatron/core/pipeline_parallel/schedules.py", 1092),
] + _MEGATRON_TAIL
_MEGATRON_TP_WAIT: Stack = [
    ("all_reduce", "torch/distributed/distributed_c10d.py", 2519),
    ("wrapper", "torch/distributed/c10d_logger.py", 83),
    ("_reduce", "megatron/core/tensor_parallel/mappings.py", 27),
    ("forward", "megatron/core/tensor_parallel/mappings.py", 228),
    ("apply", "torch/autograd/function.py", 574),
    ("forward", "megatron/core/tensor_parallel/layers.py", 1006),
    ("forward", "megatron/core/transformer/attention.py", 402),
    ("forward_step", "megatron/core/pipeline_parallel/schedules.py", 275),
] + _MEGATRON_TAIL
_MEGATRON_COMPUTE: Stack = [
    ("_flash_attn_forward", "flash_attn/flash_attn_interface.py", 91),
    ("forward", "megatron/core/transformer/dot_product_attention.py", 166),
    ("forward", "megatron/core/transformer/attention.py", 380),
    ("forward", "megatron/core/transformer/transformer_layer.py", 302),
    ("forward_step", "megatron/core/pipeline_parallel/schedules.py", 275),
] + _MEGATRON_TAIL
_JAX_STEP: Stack = [
    ("_pjit_call_impl_python", "jax/_src/pjit.py", 1284),
    ("call_impl_cache_miss", "jax/_src/pjit.py", 1309),
    ("_pjit_call_impl", "jax/_src/pjit.py", 1333),
    ("bind_with_trace", "jax/_src/core.py", 2788),
    ("_python_pjit_helper", "jax/_src/pjit.py", 186),
    ("cache_miss", "jax/_src/pjit.py", 305),
    ("train_loop", "maxtext/train.py", 611),
    ("main", "maxtext/train.py", 690),
    ("<module>", "maxtext/train.py", 702),
]
_JAX_DATA: Stack = [
    ("_next_internal", "tensorflow/python/data/ops/iterator_ops.py", 757),
    ("__next__", "tensorflow/python/data/ops/iterator_ops.py", 814),
    ("__next__", "grain/_src/python/data_loader.py", 412),
    ("load_next_batch", "maxtext/multihost_dataloading.py", 124),
    ("train_loop", "maxtext/train.py", 598),
    ("main", "maxtext/train.py", 690),
    ("<module>", "maxtext/train.py", 702),
]
