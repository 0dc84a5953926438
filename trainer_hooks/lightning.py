"""faultlens in a Lightning job: one callback.

    from faultlens.trainer_hooks.lightning import FaultlensCallback
    faultlens = FaultlensCallback()                  # job, node, broker: from `faultlens run`'s environment
    trainer = lightning.Trainer(callbacks=[faultlens], ...)
    trainer.fit(model, ckpt_path=faultlens.resume_checkpoint(trainer))

Every optimizer step publishes a ``train``/``step`` event (loss, grad norm, tokens, step time, the optimizer's learning rate)
through trainer_hooks.hook.TrainerHook, and then, at that step boundary, the job's signed commands
are obeyed: ``checkpoint`` saves through ``Trainer.save_checkpoint`` (every rank, as Lightning
requires; rank 0 decides when, so all ranks save at the same step); ``stop``, ``restart``,
``rollback``, ``reattempt`` and ``evict`` end ``fit`` with SystemExit and the code of
trainer_hooks.exit_codes, which `faultlens run` acts on. ``capture_stacks`` is answered from the
hook's listener thread (faulthandler stacks, then the Flight Recorder dump), even while a rank is
stuck in a collective. After a restart, :meth:`FaultlensCallback.resume_checkpoint` gives the
checkpoint to resume from: the one the command named, the one before the newest for a rollback,
else the newest.

At setup, rank 0 publishes the job's parallel groups as the strategy lays them out
(:func:`strategy_layout`, trainer_hooks/parallel_groups.py): ModelParallelStrategy's
data-parallel × tensor-parallel device mesh; DDP, FSDP and DeepSpeed name no other groups, so
data parallel only. ``from_scratch=True`` (a model that starts from random weights) lets the
stalled-loss diagnosis tell a run that never learned; a run resumed from a checkpoint sends False.

Needs Lightning (``pip install 'faultlens[lightning]'``); imported only here.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError as exc:  # the trainer side installs without it
    raise ImportError("faultlens.trainer_hooks.lightning needs Lightning: pip install 'faultlens[lightning]'") from exc

from faultlens.events.signing import VerifyKeys
from faultlens.streams.config import KafkaSettings
from faultlens.trainer_hooks import flight_recorder
from faultlens.trainer_hooks.callback_support import (
    HookIdentity,
    count_tokens,
    eval_chance,
    grad_norm,
    make_hook,
    optimizer_lr,
    resume_from_environment,
    step_loss,
)
from faultlens.trainer_hooks.hook import TrainerHook
from faultlens.trainer_hooks.parallel_groups import Layout, publish_layout

log = logging.getLogger(__name__)


def strategy_layout(strategy: Any, world: int) -> Layout:
    """The groups ``strategy`` lays its ranks out on: its named device mesh (ModelParallelStrategy's
    ``data_parallel`` × ``tensor_parallel``), else data parallel only: DDP's replicas, and FSDP's and
    DeepSpeed's shards, all step together in one data-parallel group (an unnamed HSDP mesh too)."""
    name = type(strategy).__name__
    # _device_mesh: the public property raises before setup, and other strategies have none.
    return (Layout.of_mesh(getattr(strategy, "_device_mesh", None), f"Lightning {name}")
            or Layout.data_parallel(world, f"Lightning {name} names no tensor or pipeline groups: data parallel only"))


class FaultlensCallback(pl.Callback):
    """Publishes step telemetry and obeys the job's commands at step boundaries (module docstring).

    ``job``, ``node``, ``settings``, ``keys``, ``state_dir``: as TrainerHook's, defaulting to the
    environment `faultlens run` sets. ``dirpath``: where commanded checkpoints go (default: the
    ModelCheckpoint's folder, else ``default_root_dir/checkpoints``). ``tokens``: counts a batch's
    tokens (default :func:`callback_support.count_tokens`). ``classes``: the loss's class count (a
    language model's vocabulary), for the stalled-loss diagnosis. ``from_scratch``: True when the
    model starts from random weights, False for a fine-tune (a resumed fit always sends False). Not
    inferred: a fit without ``ckpt_path`` at global step 0 is as often a module given trained weights
    (``load_from_checkpoint``, a pretrained backbone) as a random one, and a trained model's flat loss
    read as "from scratch" is one that never learned (issue 54, fresh batch 8's "retrained" TCN).
    ``chance_loss``: the loss of answering with the labels' distribution (its entropy: where the user
    gives it, e.g. :func:`callback_support.label_prior_loss` of the training labels; a datamodule's
    labels are not the callback's to read).
    ``parallel_groups``: publish the strategy's groups at setup (default True). Other keywords go
    to TrainerHook (``flops_per_step``, ``peak_flops``, ``exit_grace_s``)."""

    def __init__(self, *, job: str | None = None, node: str | None = None, settings: KafkaSettings | None = None,
                 keys: VerifyKeys | None = None, state_dir: str | os.PathLike[str] | None = None,
                 dirpath: str | os.PathLike[str] | None = None, tokens: Callable[[Any], int | None] = count_tokens,
                 classes: int | None = None, from_scratch: bool | None = None, chance_loss: float | None = None,
                 parallel_groups: bool = True, **hook_kwargs: Any):
        # Before the Trainer creates its process groups, or the recorder records nothing.
        flight_recorder.enable()
        self._identity: HookIdentity = {"job": job, "node": node, "settings": settings, "keys": keys, "state_dir": state_dir}
        self.from_scratch = from_scratch
        self.parallel_groups = parallel_groups
        self._dirpath = dirpath
        self._count_tokens = tokens
        self.classes = classes
        self.chance_loss = chance_loss
        self._hook_kwargs = hook_kwargs
        self.hook: TrainerHook | None = None
        self._save_requested = False
        self._reset_step()
        self._published_step = -1

    def _reset_step(self) -> None:
        self._losses: list[float] = []
        self._tokens: int | None = None
        self._grad_norm: float | None = None
        self._compute_s = 0.0

    # --- where checkpoints are -----------------------------------------------------------------
    def checkpoint_dir(self, trainer: pl.Trainer) -> Path:
        if self._dirpath is not None:
            return Path(self._dirpath)
        ckpt = trainer.checkpoint_callback
        if ckpt is not None and getattr(ckpt, "dirpath", None):
            return Path(ckpt.dirpath)
        return Path(trainer.default_root_dir) / "checkpoints"

    def resume_checkpoint(self, trainer: pl.Trainer) -> str | None:
        """The ``ckpt_path`` for ``fit`` after `faultlens run` restarted the workers (None: start afresh)."""
        folder = self.checkpoint_dir(trainer)
        found = sorted(folder.glob("*.ckpt"), key=lambda p: (p.stat().st_mtime_ns, p.name)) if folder.is_dir() else []
        return resume_from_environment([str(p) for p in found])

    # --- Lightning's hooks -------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or self.hook is not None:
            return
        self.hook = make_hook(rank=trainer.global_rank, checkpoint_dir=self.checkpoint_dir(trainer),
                              on_checkpoint=self._request_save, flight_recorder=True,
                              from_scratch=self.from_scratch, **self._identity, **self._hook_kwargs)
        self.hook.wait_ready()
        if self.parallel_groups:
            # The strategy made its process groups and mesh in setup_environment, before this hook.
            publish_layout(self.hook, strategy_layout(trainer.strategy, trainer.world_size), trainer.global_rank)
        trainer.strategy.barrier("faultlens-listening")  # no command issued from here on slips past a rank

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._published_step = trainer.global_step  # a resumed run counts on from its checkpoint's step
        if self.hook is not None and (trainer.ckpt_path is not None or trainer.global_step > 0):
            self.hook.from_scratch = False  # its weights are a checkpoint's, whatever the model began as

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        self._batch_started = time.monotonic()

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        # Lightning calls this before clipping (and after unscaling under AMP): the true norm.
        self._grad_norm = grad_norm(pl_module.parameters())

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.hook is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None and hasattr(loss, "item"):
            self._losses.append(float(loss.item()))
        counted = self._count_tokens(batch)
        if counted is not None:
            self._tokens = (self._tokens or 0) + counted
        self._compute_s += time.monotonic() - getattr(self, "_batch_started", time.monotonic())
        step = trainer.global_step
        if step == self._published_step:
            return  # a micro-batch of an accumulating step: the optimizer has not stepped yet
        self._published_step = step
        # Automatic optimization divides each micro-batch's loss by the accumulation count.
        loss_value = step_loss(self._losses, shares=pl_module.automatic_optimization)
        norm, tokens, compute_s = self._grad_norm, self._tokens, self._compute_s
        self._reset_step()
        lr = optimizer_lr(trainer.optimizers[0]) if trainer.optimizers else None
        self.hook.step(loss=loss_value, grad_norm=norm, tokens=tokens, compute_s=compute_s, step=step,
                       classes=self.classes, lr=lr, chance_loss=self.chance_loss)  # obeys commands; SystemExit on a stop or restart
        self._save_if_requested(trainer, step)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A validation run of ``fit`` (not its sanity check): the logged metrics whose names begin with
        ``val`` (``val_loss``, ``val_acc``) as ``train``/``eval``, each loss or accuracy with its chance where
        ``classes`` (or ``chance_loss``) is given, so a held-out metric at chance is found though the
        training loss falls."""
        if self.hook is None or trainer.sanity_checking:
            return
        held_out = {}
        for name, value in trainer.callback_metrics.items():
            if name.lower().startswith("val") and getattr(value, "numel", lambda: 1)() == 1:
                held_out[name] = float(value)
        if held_out:
            chance = eval_chance(held_out, self.classes, self.chance_loss, None)
            self.hook.eval(held_out, step=trainer.global_step, chance=chance)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._close()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._close()

    # --- commands -------------------------------------------------------------------------
    def _request_save(self) -> None:
        self._save_requested = True  # saved by _save_if_requested, at the step every rank agrees on

    def _save_if_requested(self, trainer: pl.Trainer, step: int) -> None:
        # Every rank hears the command, each at its own step; saving is collective in Lightning,
        # so rank 0's request decides for all (one tiny broadcast per step, only when distributed).
        due = self._save_requested
        if trainer.world_size > 1:
            due = bool(trainer.strategy.broadcast(due, src=0))
        if not due:
            return
        self._save_requested = False
        path = self.checkpoint_dir(trainer) / f"faultlens-step={step}.ckpt"
        trainer.save_checkpoint(path)
        if trainer.is_global_zero and self.hook is not None:
            self.hook.checkpoint_saved(step, str(path))
            log.info("faultlens: saved %s on command", path)

    def _close(self) -> None:
        if self.hook is not None:
            self.hook.close()
            self.hook = None
