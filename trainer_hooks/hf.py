"""faultlens in a Hugging Face ``Trainer`` job: one callback.

    from faultlens.trainer_hooks.hf import FaultlensCallback
    faultlens = FaultlensCallback()                  # job, node, broker: from `faultlens run`'s environment
    trainer = transformers.Trainer(..., callbacks=[faultlens])
    trainer.train(resume_from_checkpoint=faultlens.resume_checkpoint(trainer.args))

Every optimizer step publishes a ``train``/``step`` event (loss, grad norm, tokens, step time, the optimizer's learning rate)
through trainer_hooks.hook.TrainerHook, and then, at that step boundary, the job's signed commands
are obeyed: ``checkpoint`` sets ``control.should_save``, so the Trainer saves its own
``checkpoint-N`` folder at once (rank 0 decides when, so every rank saves at the same step);
``stop``, ``restart``, ``rollback``, ``reattempt`` and ``evict`` end ``train`` with SystemExit and
the code of trainer_hooks.exit_codes, which `faultlens run` acts on. ``capture_stacks`` is answered
from the hook's listener thread (faulthandler stacks, then the Flight Recorder dump). Every
checkpoint the Trainer saves is published (``train``/``checkpoint``). After a restart,
:meth:`FaultlensCallback.resume_checkpoint` gives the folder to resume from: the one the command
named, the one before the newest for a rollback, else the newest.

At the start of training, rank 0 publishes the job's parallel groups as Accelerate laid them out
(:func:`accelerate_layout`, trainer_hooks/parallel_groups.py): the device mesh of a
``ParallelismConfig`` (the Trainer makes one for a model sharded at load time), the Megatron-LM
plugin's tensor and pipeline degrees; plain DDP, FSDP and DeepSpeed ZeRO name no other groups, so
data parallel only (DeepSpeed AutoTP's groups are not read: nothing is published, a warning says
so). ``from_scratch=True`` (a model that starts from random weights) lets the stalled-loss
diagnosis tell a run that never learned; a resumed run sends False.

The Trainer hands its callbacks neither the step's loss nor its gradient norm, so the callback
reads them where they are made: a forward hook on the model takes each micro-batch's loss and
tokens (training mode only), and a hook on every parameter's gradient accumulation takes the
gradient's norm before the Trainer clips it (on DDP, this rank's gradient, before averaging).
A Trainer whose ``compute_loss`` makes the loss from the model's outputs (TRL's DPO, KTO and reward
trainers, a user's override) calls the model without labels: no forward carries a loss. Its steps
carry the loss the Trainer logs instead (``on_log``'s ``loss``: the mean over the steps since its
last log and over the ranks, as ``loss_steps`` says), sent from that log at the logged step (an epoch's
log too); the steps between logs carry none, nor does a window whose non-finite loss the Trainer's NaN filter
replaced (trainer_hooks/hf_logged_loss.py). A forward's loss, where there is one, stays the step's (never both).
What the callback states of the loss (its classes, its chance): trainer_hooks/hf_loss_facts.py. Under fp16 the
gradient norm is the loss scaler's unscaled, none for an overflow it skips: trainer_hooks/hf_grad_scaler.py.

Needs transformers (``pip install 'faultlens[hf]'``); imported only here.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    from transformers import (
        TrainerCallback,
        TrainerControl,
        TrainerState,
        TrainingArguments,
    )
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
except ImportError as exc:  # the trainer side installs without it
    raise ImportError("faultlens.trainer_hooks.hf needs transformers: pip install 'faultlens[hf]'") from exc

import torch

from faultlens.events.payloads_job import TrainEval
from faultlens.events.signing import VerifyKeys
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks import flight_recorder
from faultlens.trainer_hooks.callback_support import (
    HookIdentity,
    count_tokens,
    eval_chance,
    make_hook,
    optimizer_lr,
    resume_from_environment,
    shares_entropy,
    step_loss,
)
from faultlens.trainer_hooks.hf_grad_scaler import ScaledNorm
from faultlens.trainer_hooks.hf_logged_loss import LOSSES_JUDGED_LEAST, LoggedLoss, log_follows, logged_losses
from faultlens.trainer_hooks.hf_loss_facts import (  # noqa: F401 (train_label_prior, dpo_chance: read here too)
    began_from_scratch,
    dpo_chance,
    loss_classes,
    preference_chance,
    table_columns,
    train_label_prior,
    train_label_shares,
)
from faultlens.trainer_hooks.hook import TrainerHook
from faultlens.trainer_hooks.parallel_groups import Layout, publish_layout

log = logging.getLogger(__name__)


def accelerate_layout(state: Any, world: int) -> Layout | None:
    """The groups Accelerate lays the ranks out on (``state``: its AcceleratorState): its named device
    mesh (a ParallelismConfig's dp_replicate × dp_shard × cp × tp; the Trainer makes one for a model
    sharded at load time from its tp_size), else the Megatron-LM plugin's degrees in Megatron's rank
    order (tensor fastest, then data, pipeline slowest), else data parallel only (DDP, FSDP,
    DeepSpeed ZeRO). None when the groups cannot be read (DeepSpeed AutoTP, degrees that do not
    divide the world): the launcher's placement stands, and a warning says so."""
    kind = str(getattr(getattr(state, "distributed_type", None), "value", "") or "DDP")
    meshed = Layout.of_mesh(getattr(state, "device_mesh", None), "Accelerate's")
    if meshed is not None:
        return meshed
    megatron = getattr(state, "megatron_lm_plugin", None)
    if megatron is not None:
        tp, pp = int(megatron.tp_degree or 1), int(megatron.pp_degree or 1)
        try:
            return Layout.ordered(world, (("pp", pp), ("dp", world // (tp * pp)), ("tp", tp)),
                                  f"the Megatron-LM plugin (tp_degree={tp}, pp_degree={pp})")
        except ValueError as exc:
            log.warning("faultlens: the Megatron-LM plugin's groups: %s; the launcher's placement stands", exc)
            return None
    deepspeed = getattr(state, "deepspeed_plugin", None)
    config = getattr(getattr(deepspeed, "hf_ds_config", None), "config", None) or {}
    autotp = (config.get("tensor_parallel") or {}).get("autotp_size") or 1
    if int(autotp) > 1:
        log.warning("faultlens: DeepSpeed AutoTP (autotp_size=%s): its tensor groups are not read; the launcher's "
                    "data-parallel placement stands (publish yours with hook.publish_topology)", autotp)
        return None
    return Layout.data_parallel(world, f"Accelerate {kind} names no tensor or pipeline groups: data parallel only")


def checkpoint_folders(output_dir: str | os.PathLike[str]) -> list[str]:
    """The Trainer's ``checkpoint-N`` folders in ``output_dir``, oldest (lowest N) first."""
    folder = Path(output_dir)
    found = []
    for p in folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if folder.is_dir() else ():
        suffix = p.name.rsplit("-", 1)[-1]
        if p.is_dir() and suffix.isdigit():
            found.append((int(suffix), str(p)))
    return [path for _, path in sorted(found)]


class FaultlensCallback(TrainerCallback):
    """Publishes step telemetry and obeys the job's commands at step boundaries (module docstring).

    ``job``, ``node``, ``settings``, ``keys``, ``state_dir``: as TrainerHook's, defaulting to the
    environment `faultlens run` sets (the state folder falls back to ``output_dir``). ``tokens``:
    counts a forward call's tokens from its keyword inputs (default
    :func:`callback_support.count_tokens`). ``classes``: the loss's class count (default:
    :func:`loss_classes`, a classification head's labels or the vocabulary), for the stalled-loss
    diagnosis. ``from_scratch``: True when the model starts from random weights, False for a
    fine-tune (default: :func:`began_from_scratch`, True for a model built from a config; a resumed
    run always sends False). ``chance_loss``: the loss of answering with the labels' distribution (default:
    :func:`train_label_prior`, a single-label classification head's class prior from a ``datasets`` table).
    ``parallel_groups``: publish Accelerate's groups at the start of training (default True). Other
    keywords go to TrainerHook (``flops_per_step``, ``peak_flops``, ``exit_grace_s``)."""

    def __init__(self, *, job: str | None = None, node: str | None = None, settings: KafkaSettings | None = None,
                 keys: VerifyKeys | None = None, state_dir: str | os.PathLike[str] | None = None,
                 tokens: Callable[[Any], int | None] = count_tokens, classes: int | None = None,
                 from_scratch: bool | None = None, chance_loss: float | None = None, parallel_groups: bool = True,
                 **hook_kwargs: Any):
        # Before the process groups exist (TrainingArguments creates them), or the recorder records nothing.
        flight_recorder.enable()
        self._identity: HookIdentity = {"job": job, "node": node, "settings": settings, "keys": keys, "state_dir": state_dir}
        self.from_scratch = from_scratch
        self.parallel_groups = parallel_groups
        self._count_tokens = tokens
        self.classes = classes
        self.chance_loss = chance_loss
        self._hook_kwargs = hook_kwargs
        self.hook: TrainerHook | None = None
        self._handles: list[Any] = []
        self._model: torch.nn.Module | None = None
        self._save_requested = False
        self._world = 1
        self._majority: float | None = None
        self._logged = LoggedLoss()  # a step whose loss the Trainer's log brings (trainer_hooks/hf_logged_loss.py)
        self._columns: tuple[str, ...] | None = None  # the training table's
        self._scale = ScaledNorm()  # an fp16 loss scaler's, where one is on
        self._reset_step()

    def _reset_step(self) -> None:
        self._losses: list[torch.Tensor] = []
        self._loss_is_share = False
        self._tokens: int | None = None
        self._grad_norms: dict[int, torch.Tensor] = {}
        self._grad_norm: float | None = None
        self._step_started = time.monotonic()

    def resume_checkpoint(self, args: TrainingArguments) -> str | None:
        """``resume_from_checkpoint`` for ``train`` after `faultlens run` restarted the workers (None: afresh)."""
        return resume_from_environment(checkpoint_folders(args.output_dir))

    # --- the Trainer's events ------------------------------------------------------------------
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: torch.nn.Module | None = None, **kwargs: Any) -> None:
        if self.hook is not None:
            return
        if model is not None:
            self._watch(model)
            self._model = model
            shares = train_label_shares(model, kwargs.get("train_dataloader"))
            if self.chance_loss is None:
                self.chance_loss = shares_entropy(shares)
            # The commonest label's share: a held-out accuracy's chance, where the labels say it.
            self._majority = max(shares) if shares else None
        self._columns = table_columns(kwargs.get("train_dataloader"))
        self._world = args.world_size
        self._logged.start(state.global_step)
        # on_train_begin comes after a resumed run loaded its checkpoint's state (global_step > 0).
        from_scratch = False if state.global_step > 0 else began_from_scratch(model, self.from_scratch)
        self.hook = make_hook(rank=args.process_index, checkpoint_dir=args.output_dir,
                              on_checkpoint=self._request_save, flight_recorder=True, from_scratch=from_scratch,
                              **self._identity, **self._hook_kwargs)
        self.hook.wait_ready()
        if self.parallel_groups:
            from accelerate.state import AcceleratorState

            # The Trainer's Accelerator exists by now: the state is its (a shared singleton).
            layout = accelerate_layout(AcceleratorState(), self._world)
            if layout is not None:
                publish_layout(self.hook, layout, args.process_index)
        if self._world > 1 and torch.distributed.is_initialized():
            torch.distributed.barrier()  # no command issued from here on slips past a rank

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._send_unsent(control)  # its log never came: the step goes without a loss, as before
        self._step_started = time.monotonic()

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                              optimizer: Any = None, **kwargs: Any) -> None:
        norms = list(self._grad_norms.values())
        if not norms:
            return
        # Under fp16 the gradients were accumulated scaled (trainer_hooks/hf_grad_scaler.py).
        self._grad_norm = self._scale.unscaled(float(torch.linalg.vector_norm(torch.stack(norms))), optimizer)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> TrainerControl:
        if self.hook is None:
            return control
        compute_s = time.monotonic() - self._step_started
        losses = [float(t) for t in self._losses]
        loss = step_loss(losses, shares=self._loss_is_share)
        if loss is not None and self._loss_is_share and self._world > 1 and getattr(args, "average_tokens_across_devices", False):
            loss *= self._world  # each share was of the whole job's tokens (as the Trainer scales it)
        step = {"grad_norm": self._scale.model_norm(self._grad_norm), "tokens": self._tokens, "compute_s": compute_s,
                "step": state.global_step, "lr": optimizer_lr(kwargs.get("optimizer"))}
        self._reset_step()
        if loss is None:
            # The Trainer's compute_loss made the loss outside the forward: where its log of it (on_log) comes next,
            # before the step's evaluation and save, the step waits for it (trainer_hooks/hf_logged_loss.py).
            self._logged.seen(step)
            self._warn_sparse(args, state)
            if log_follows(args, state, control):
                self._logged.hold(step)
                return control
        # A loss made outside the forward is over what the user's code says, not the model's head's classes.
        classes = self.classes if self.classes is not None or loss is None else loss_classes(self._model)
        return self._send(control, loss=loss, classes=classes, **step)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> TrainerControl:
        """The Trainer's log: its ``loss`` is the step's held back in on_step_end, averaged over the steps since
        its last log (``loss_steps``; none where the NaN filter hid a step's: trainer_hooks/hf_logged_loss.py); a TRL
        DPO or reward model's run states its chance (:func:`preference_chance`)."""
        logs = logs or {}
        if self.chance_loss is None and (chance := preference_chance(args, logs, self._columns)) is not None:
            self.chance_loss = chance
        if "loss" not in logs:
            return self._send_unsent(control)  # an evaluation's or the run's summary
        loss = self._logged.logged(args, state.global_step, logs["loss"])
        # (Where the step's forward carried its loss, nothing waits: it was sent with it.)
        return self._send_unsent(control, **loss)

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    metrics: dict[str, float] | None = None, **kwargs: Any) -> None:
        """The Trainer's evaluation on its eval set: its loss and accuracy-like metrics (``eval_loss``,
        ``eval_accuracy``; not its runtime) as ``train``/``eval``, each with its chance where the classes are
        known, so a held-out metric that stays at chance is found though the training loss falls."""
        if self.hook is None or not metrics:
            return
        held_out = {k: v for k, v in metrics.items() if TrainEval.direction(k) is not None}
        classes = self.classes if self.classes is not None else loss_classes(self._model)
        self.hook.eval(held_out, step=state.global_step,
                       chance=eval_chance(held_out, classes, self.chance_loss, self._majority))

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        path = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if self.hook is not None and state.is_world_process_zero and path.is_dir():
            self.hook.checkpoint_saved(state.global_step, str(path))

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._send_unsent(control)
        self.close()

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.hook is not None:
            self.hook.close()
            self.hook = None

    # --- what the Trainer does not hand its callbacks ------------------------------------------
    def _watch(self, model: torch.nn.Module) -> None:
        self._handles.append(model.register_forward_hook(self._forward_done, with_kwargs=True))
        for i, p in enumerate(model.parameters()):
            if p.requires_grad:
                self._handles.append(p.register_post_accumulate_grad_hook(self._grad_hook(i)))

    def _forward_done(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if not module.training:
            return  # evaluation and generation are not training steps
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if isinstance(loss, torch.Tensor):
            self._losses.append(loss.detach())
            # Given num_items_in_batch, the model divides by the step's token count, not the micro-batch's.
            self._loss_is_share = kwargs.get("num_items_in_batch") is not None
        counted = self._count_tokens(kwargs)
        if counted is not None:
            self._tokens = (self._tokens or 0) + counted

    def _grad_hook(self, index: int) -> Callable[[torch.Tensor], None]:
        def done(p: torch.Tensor) -> None:
            # Accumulated so far: after the step's last micro-batch this is the gradient the Trainer clips
            # (a post-accumulate hook runs after the gradient was written, so it is there).
            if p.grad is not None:
                self._grad_norms[index] = torch.linalg.vector_norm(p.grad.detach(), dtype=torch.float32)
        return done

    # --- sending a step ------------------------------------------------------------------------
    def _send(self, control: TrainerControl, **step: Any) -> TrainerControl:
        assert self.hook is not None
        self.hook.step(chance_loss=self.chance_loss, **step)  # obeys commands; SystemExit on a stop or restart
        if self._save_due():
            control.should_save = True  # the Trainer saves right after this event, through its own code
        return control

    def _send_unsent(self, control: TrainerControl, **loss: Any) -> TrainerControl:
        step = self._logged.take()
        if step is None or self.hook is None:
            return control
        return self._send(control, classes=self.classes, **step, **loss)

    def _warn_sparse(self, args: TrainingArguments, state: TrainerState) -> None:
        if self._logged.warned:
            return
        self._logged.warned = True
        count = logged_losses(args, state)
        if count is not None and count < LOSSES_JUDGED_LEAST:
            log.warning("faultlens: this Trainer makes its loss outside the model's forward, so its loss reaches "
                        "faultlens only in the Trainer's logs: %d over the run (logging_strategy=%s), fewer than the "
                        "%d the stalled-loss diagnosis judges at least; log more often (logging_steps) for it to judge",
                        count, getattr(args.logging_strategy, "value", args.logging_strategy), LOSSES_JUDGED_LEAST)

    # --- commands -------------------------------------------------------------------------
    def _request_save(self) -> None:
        self._save_requested = True

    def _save_due(self) -> bool:
        # Every rank hears the command, each at its own step; saving is collective in the Trainer,
        # so rank 0's request decides for all (one tiny broadcast per step, only when distributed).
        due = self._save_requested
        if self._world > 1 and torch.distributed.is_initialized():
            flag = torch.tensor([1 if due else 0], dtype=torch.int32)
            if torch.distributed.get_backend() == "nccl":
                flag = flag.cuda()
            torch.distributed.broadcast(flag, src=0)
            due = bool(flag.item())
        if due:
            self._save_requested = False
        return due
