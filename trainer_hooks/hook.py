"""The object a training loop creates: step telemetry out, signed commands in.

    hook = TrainerHook(job="j1", rank=rank, node=node, settings=settings, keys=keys,
                       state_dir=ckpt_dir, on_checkpoint=save)
    for step in ...:
        loss = train_step()
        hook.step(loss=loss.item(), grad_norm=g, tokens=n)   # may raise SystemExit(code)

Telemetry goes out through trainer_hooks/outbox.py: ``step`` only appends to a bounded spool that a
thread of its own sends, so no broker, a lost one or a slow one never stops training.
``TrainerHook.from_env(...)`` makes the hook from the environment `faultlens run` sets (off under
plain torchrun); an uncaught exception is written to torchrun's error file for the launcher
(trainer_hooks/worker_exits.py).

Commands (see trainer_hooks.listener for what is obeyed):
- ``checkpoint``: ``on_checkpoint()`` runs in the training thread at the next step boundary;
- ``capture_stacks``: every thread's stack (faulthandler) is published at once, from the
  listener thread, so a rank stuck inside a collective still answers; then, when the trainer
  uses torch.distributed, its Flight Recorder dump (``recorder_dump``, size-bounded; the hook
  sets TORCH_FR_BUFFER_SIZE when it starts, so create it before the process groups);
- ``evict`` / ``restart`` / ``rollback`` / ``reattempt`` / ``stop``: the loop exits at the next
  step boundary with the code of trainer_hooks.exit_codes; a loop stuck longer than
  ``exit_grace_s`` is ended from the listener thread with the same code.
Every command addressed here is acked (`train`/`command_ack`), obeyed or refused with the reason
(events.command_screen); rank 0 also acks, once for the job, commands of this job meant for other
nodes or ranks, and every rank acks a command of another job that names its node. Commands must be signed with a key in ``keys`` (the public key of
`faultlens keys generate`; default: the files named by FAULTLENS_VERIFY_KEY). The ids of commands
handled are kept in ``state_dir`` (default FAULTLENS_STATE_DIR, else $FAULTLENS_HOME; the
checkpoint directory is a good choice), so a restarted trainer refuses a duplicate of a command it handled.
"""

from __future__ import annotations

import faulthandler
import logging
import math
import os
import socket
import tempfile
import threading
import time
from numbers import Real
from typing import Callable, Mapping

from faultlens.events.command import Command
from faultlens.events.command_memory import CommandMemory, default_state_dir, memory_file
from faultlens.events.command_screen import CommandScreen, Screened, ack_payload
from faultlens.events.env_number import env_number
from faultlens.events.envelope import Envelope, number
from faultlens.events.flight_recorder import RECORDER_KIND, recorder_payload
from faultlens.events.signing import VerifyKeys, load_verify_keys
from faultlens.events.topology import Topology
from faultlens.streams.broker import answers
from faultlens.streams.command_listener import CommandListener
from faultlens.streams.config import KafkaSettings
from faultlens.streams.producer import Producer
from faultlens.trainer_hooks import flight_recorder as flight_recorder_dump
from faultlens.trainer_hooks.ack_reasons import obeyed_reason
from faultlens.trainer_hooks.exit_codes import ACTION_EXIT
from faultlens.trainer_hooks.outbox import Outbox
from faultlens.trainer_hooks.outbox_voice import OutageVoice, client_threads
from faultlens.trainer_hooks.worker_exits import record_uncaught

log = logging.getLogger(__name__)


CLOSE_S = 3.0  # a broker that answers takes the last steps' events in milliseconds


def close_bound(environ: Mapping[str, str] = os.environ) -> float:
    """The hook's close bound in seconds: FAULTLENS_HOOK_CLOSE_S, else :data:`CLOSE_S` (a bad value
    is warned about, never stops the training run)."""
    return env_number("FAULTLENS_HOOK_CLOSE_S", CLOSE_S, on_bad="warn", at_least=0.0, environ=environ)


class _Nowhere:
    """The producer of a hook that is off (TrainerHook.from_env outside `faultlens run`)."""

    def send_event(self, event: Envelope) -> None:
        pass

    def flush(self, timeout: float | None = None) -> bool:
        return True


def faulthandler_dump() -> str:
    """Every thread's Python stack, as faulthandler prints it (it needs a real file descriptor)."""
    with tempfile.TemporaryFile(mode="w+") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        return f.read()


class TrainerHook:
    def __init__(self, *, job: str, rank: int, node: str, settings: KafkaSettings,
                 keys: VerifyKeys | None = None, state_dir: str | os.PathLike[str] | None = None,
                 on_checkpoint: Callable[[], None] | None = None, flops_per_step: float | None = None,
                 peak_flops: float | None = None, exit_grace_s: float = 10.0, listen: bool = True,
                 producer: Producer | None = None, flight_recorder: bool = True,
                 from_scratch: bool | None = None, close_s: float | None = None):
        self.job, self.rank, self.node = job, rank, node
        # How long close() may take at most: it runs as the trainer leaves, and a broker slow or gone
        # must not hold the exit (FAULTLENS_HOOK_CLOSE_S; what it leaves undelivered is counted and said).
        self.close_s = close_s if close_s is not None else close_bound()
        # Sent with every step (the pipeline may first see a run mid-way): True when the weights began
        # random, False when from a checkpoint or a pretrained model (diagnosis/rules/loss_stalled.py).
        self.from_scratch = from_scratch
        # An uncaught exception reaches `faultlens run` (the error file torchrun names), which
        # reports it as the node agent would: a crash diagnosed with no node agent.
        record_uncaught()
        if flight_recorder:
            # Before the trainer creates its process groups (make the hook first), or it records nothing.
            flight_recorder_dump.enable()
        self.on_checkpoint = on_checkpoint
        self.flops_per_step = flops_per_step
        self.peak_flops = peak_flops
        self.exit_grace_s = exit_grace_s
        # Our own telemetry goes through a spool that never blocks nor raises (trainer_hooks/outbox.py):
        # the operator side's broker must not stop training. A producer handed in is used as given.
        outbox_thread = f"faultlens-outbox-r{rank}"  # its producer is made (and bootstraps) on it
        self.outbox = Outbox(settings, name=outbox_thread) if producer is None else None
        self.producer: Producer | Outbox = producer or self.outbox  # type: ignore[assignment]
        self.steps = 0
        self.exit_code: int | None = None
        self.exit_command: Command | None = None
        self._checkpoint_due = threading.Event()
        self._boundary_reached = threading.Event()
        self._last_step_at = time.monotonic()
        self._lock = threading.Lock()
        self.listener: CommandListener | None = None
        if listen:
            memory = CommandMemory(memory_file(state_dir or default_state_dir(), "hook", job, f"r{rank}"))
            screen = CommandScreen(keys if keys is not None else load_verify_keys(), job, node, rank, memory=memory,
                                   spokesperson=rank == 0)
            self.listener = CommandListener(settings, screen, self._on_command, self._on_refused)
        # Through an outage only the outbox's own lines speak: the clients the hook owns are DEBUG then.
        self.voice: OutageVoice | None = None
        if settings is not None and (self.outbox is not None or self.listener is not None):
            threads = client_threads(settings.client_id, *([self.listener.name] if self.listener else []),
                                     *([outbox_thread] if self.outbox else []))
            outbox = self.outbox
            self.voice = OutageVoice(threads, settings.bootstrap, lambda: outbox is not None and outbox.down,
                                     settings.client_id).install()
        if self.listener is not None:
            self.listener.start()

    @classmethod
    def from_env(cls, **kwargs: object) -> "TrainerHook":
        """This worker's hook from the environment `faultlens run` sets (FAULTLENS_JOB, RANK,
        FAULTLENS_NODE, FAULTLENS_BOOTSTRAP, FAULTLENS_VERIFY_KEY, FAULTLENS_STATE_DIR); ``kwargs``
        as for the constructor. Under plain torchrun (no FAULTLENS_JOB, or no broker address) a hook
        that publishes nothing and obeys nothing, so one script runs under both launchers."""
        job, bootstrap = os.environ.get("FAULTLENS_JOB"), os.environ.get("FAULTLENS_BOOTSTRAP")
        rank = int(os.environ.get("RANK", "0"))
        node = os.environ.get("FAULTLENS_NODE") or socket.gethostname()
        if not job or not bootstrap:
            log.info("no FAULTLENS_JOB / FAULTLENS_BOOTSTRAP (not under `faultlens run`): the hook is off")
            kwargs.setdefault("flight_recorder", False)  # nobody to ask for a dump
            return cls(job=job or "-", rank=rank, node=node, settings=None, listen=False,  # type: ignore[arg-type]
                       producer=_Nowhere(), **kwargs)  # type: ignore[arg-type]
        settings = KafkaSettings.load(overrides={"client_id": f"trainer-{job}-{rank}"})
        return cls(job=job, rank=rank, node=node, settings=settings, **kwargs)  # type: ignore[arg-type]

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Block until the listener sees new commands (so none issued after this is missed); False at
        once when no broker answers: training goes on, commands are read once one does."""
        if self.listener is None or self.listener.ready.is_set():
            return True
        bootstrap = self.listener.settings.bootstrap
        if bootstrap and not answers(bootstrap, 0.5):
            return False
        return self.listener.ready.wait(timeout)

    # --- telemetry --------------------------------------------------------------------------
    def _event(self, source: str, kind: str, data: dict) -> Envelope:
        return Envelope(ts=time.time(), job=self.job, node=self.node, source=source, kind=kind, data=data)

    def step(self, *, loss: float | None = None, grad_norm: float | None = None, tokens: int | None = None,
             compute_s: float | None = None, step: int | None = None, classes: int | None = None,
             lr: float | None = None, work: float | None = None, chance_loss: float | None = None,
             loss_steps: int | None = None) -> None:
        """Publish one step's telemetry, then act on commands that wait for a step boundary.
        ``classes``: how many classes (a language model's vocabulary) the loss is over, so that a
        loss stuck at ln(classes), a uniform guess, is recognised (diagnosis/rules/loss_stalled.py);
        ``lr``: the optimizer's learning rate, so a loss that rises when the schedule raises it (a
        warm restart) is not read as a regression; ``work``: how much work this rank did in the step,
        in a unit the same for every rank of the job (tokens routed to its experts, samples or tokens
        in its micro-batches), so that a rank slower because it had more to do (a hot expert) is not
        evicted as a slow machine (diagnosis/peers/slow_work.py); ``chance_loss``: the loss of predicting
        the labels' distribution without looking at the input (its entropy in nats), so a loss stuck at the
        class prior is recognised (callback_support.label_prior_loss); ``loss_steps``: where ``loss`` is not this
        step's own but the trainer's logged mean over the last ``loss_steps`` optimizer steps (this one the last;
        the Hugging Face callback's, for a loss made outside the model's forward)."""
        now = time.monotonic()
        step_time = now - self._last_step_at
        self._last_step_at = now
        self.steps = step if step is not None else self.steps + 1
        data: dict = {"rank": self.rank, "step": self.steps, "loss": number(loss), "grad_norm": number(grad_norm),
                      "step_time_s": round(step_time, 6), "tokens": tokens,
                      "tokens_per_s": round(tokens / step_time, 3) if tokens and step_time > 0 else None,
                      "mfu": None}
        if self.flops_per_step and self.peak_flops and step_time > 0:
            data["mfu"] = round(self.flops_per_step / step_time / self.peak_flops, 6)
        if compute_s is not None:
            data["compute_s"] = round(compute_s, 6)
        if classes is not None:
            data["classes"] = int(classes)
        if self.from_scratch is not None:
            data["from_scratch"] = bool(self.from_scratch)
        if lr is not None and math.isfinite(lr) and lr >= 0:
            data["lr"] = float(lr)
        if work is not None and math.isfinite(work) and work >= 0:
            data["work"] = float(work)
        if chance_loss is not None and math.isfinite(chance_loss) and chance_loss >= 0:
            data["chance_loss"] = float(chance_loss)
        if loss_steps is not None and loss_steps >= 1:
            data["loss_steps"] = int(loss_steps)
        self.producer.send_event(self._event("train", "step", data))
        self.boundary()

    def eval(self, metrics: Mapping[str, float], *, step: int | None = None, chance: Mapping[str, float] | None = None,
             higher_is_better: Mapping[str, bool] | None = None) -> None:
        """Publish one evaluation on held-out data (``train``/``eval``) after ``step`` (default: the last
        step published): ``metrics`` by name (``eval_loss``, ``val_acc``; a name with ``loss`` is read as
        lower-is-better, one with ``acc`` higher, others by ``higher_is_better``); ``chance``: a metric's
        value for a model that ignores its input (callback_support.eval_chance), so a held-out metric
        that stays there is read as a run that learned nothing of its task, though its training loss
        falls (diagnosis/rules/loss_eval.py). Values that are no number are left out; commands are not
        obeyed here (they wait for a step boundary)."""
        values = {str(k): number(float(v)) for k, v in metrics.items() if isinstance(v, Real) and not isinstance(v, bool)}
        if not values:
            return
        data: dict = {"rank": self.rank, "step": self.steps if step is None else step, "metrics": values}
        stated = {k: float(v) for k, v in (chance or {}).items() if k in values and math.isfinite(v)}
        if stated:
            data["chance"] = stated
        if higher_is_better:
            data["higher_is_better"] = {str(k): bool(v) for k, v in higher_is_better.items() if k in values}
        self.producer.send_event(self._event("train", "eval", data))

    def publish_topology(self, topology: Topology) -> None:
        """The job's parallel layout (TP/PP/DP groups), as the trainer knows it: `faultlens run`
        publishes the rendezvous' placement (pure data-parallel) at each start; this one, sent after,
        replaces it with the real groups a hang is localised by. One rank (rank 0) sends it."""
        self.producer.send_event(topology.to_event(self.job, time.time()))
        self.producer.flush(10.0)

    def checkpoint_saved(self, step: int, path: str) -> None:
        self.producer.send_event(self._event("train", "checkpoint", {"rank": self.rank, "step": step, "path": path}))

    def boundary(self) -> None:
        """Run what waits for a step boundary: a requested checkpoint, then a requested exit."""
        if self._checkpoint_due.is_set():
            self._checkpoint_due.clear()
            if self.on_checkpoint is not None:
                self.on_checkpoint()
        if self.exit_code is not None:
            self._boundary_reached.set()  # the loop is leaving on its own: call off the watchdog
            self.close()
            raise SystemExit(self.exit_code)

    @property
    def should_stop(self) -> bool:
        return self.exit_code is not None

    # --- commands ---------------------------------------------------------------------------
    def _ack(self, cmd: Command | None, obeyed: bool, reason: str, addressed: bool = True) -> None:
        self.producer.send_event(self._event("train", "command_ack",
                                             ack_payload(self.rank, cmd, obeyed, reason, addressed)))
        self.producer.flush(10.0)

    def _on_refused(self, result: Screened) -> None:
        self._ack(result.command, False, result.reason, result.addressed)

    def _on_command(self, cmd: Command) -> None:
        reason = obeyed_reason(cmd.action)
        if reason is None:
            return  # run_checks is the node agent's (collectors.checks), not the trainer's
        if cmd.action == "checkpoint":
            self._checkpoint_due.set()
            self._ack(cmd, True, reason)
        elif cmd.action == "capture_stacks":
            self._ack(cmd, True, reason)
            self.publish_stacks(cmd.id)
        else:
            with self._lock:
                if self.exit_code is not None:
                    return
                self.exit_code, self.exit_command = ACTION_EXIT[cmd.action], cmd
            self._ack(cmd, True, reason)
            threading.Thread(target=self._exit_if_stuck, args=(self.steps,), daemon=True).start()

    def publish_stacks(self, request_id: str | None = None) -> None:
        dump = faulthandler_dump()
        self.producer.send_event(self._event("stack", "stack_dump", {
            "rank": self.rank, "pid": os.getpid(), "dump": dump, "request_id": request_id, "tool": "faulthandler"}))
        # After the stacks, in the same partition: the hang verdict matches it per process group.
        recorded = flight_recorder_dump.dump()
        if recorded is not None:
            self.producer.send_event(self._event("stack", RECORDER_KIND,
                                                 recorder_payload(self.rank, os.getpid(), recorded, request_id)))
        self.producer.flush(10.0)

    def _exit_if_stuck(self, step_at_command: int) -> None:
        if self._boundary_reached.wait(self.exit_grace_s):
            return
        # Still here: the training thread never reached a boundary (hung in a collective).
        log.warning("rank %d did not reach a step boundary within %.0fs of %s (step %d); exiting %d now",
                    self.rank, self.exit_grace_s, self.exit_command.action if self.exit_command else "?",
                    step_at_command, self.exit_code)
        try:
            self.producer.flush(5.0)
        finally:
            os._exit(self.exit_code or 1)

    def close(self) -> None:
        # A closed hook's process is leaving (or goes on without it, as in a test): the watchdog
        # must not end it later with os._exit.
        self._boundary_reached.set()
        if self.voice is not None:
            self.voice.closing()  # what the clients say as they close is no news to the user closing them
        if self.listener is not None:
            self.listener.stop()
        try:
            self._close_producer()
        finally:
            if self.voice is not None:
                self.voice.release()

    def _close_producer(self) -> None:
        if self.outbox is not None:
            self.outbox.close(self.close_s)  # waits only while a broker takes what is left, at most close_s
            return
        try:
            self.producer.flush(self.close_s)
        except Exception as exc:  # noqa: BLE001 - shutting down: report, do not mask the exit code
            log.warning("flushing telemetry on close: %s", exc)

    def __enter__(self) -> "TrainerHook":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
