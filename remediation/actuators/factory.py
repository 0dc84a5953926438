"""Build the actuator a flag or the environment names (`--actuator`, FAULTLENS_ACTUATOR)."""

from __future__ import annotations

from dataclasses import dataclass

from faultlens.remediation.actuators.base import Actuator, NoActuator
from faultlens.remediation.actuators.kubernetes import KubernetesActuator, KubernetesConfig
from faultlens.remediation.actuators.script import ScriptActuator, ScriptConfig
from faultlens.remediation.actuators.slurm import SlurmActuator, SlurmConfig

ACTUATORS = ("none", "slurm", "kubernetes", "script")
ACTUATOR_ENV = "FAULTLENS_ACTUATOR"
COMMAND_ENV = "FAULTLENS_ACTUATOR_COMMAND"


@dataclass(frozen=True)
class ActuatorSettings:
    kind: str = "none"
    command: str = ""  # script
    timeout_s: float = 20.0
    slurm_requeue: str = "requeue"
    slurm_signal: str = "USR1"
    k8s_namespace: str = "default"
    k8s_pod_selector: str = "job-name={job}"
    kubeconfig: str | None = None
    requeue_on_evict: bool = True


def make_actuator(settings: ActuatorSettings) -> Actuator:
    """Raises ValueError for a setting that cannot work (unknown kind, script without a command)."""
    if settings.timeout_s <= 0:
        raise ValueError(f"actuator timeout must be positive, got {settings.timeout_s}")
    if settings.kind == "none":
        return NoActuator()
    if settings.kind == "slurm":
        return SlurmActuator(SlurmConfig(settings.timeout_s, settings.slurm_requeue, settings.slurm_signal))
    if settings.kind == "kubernetes":
        if "{job}" not in settings.k8s_pod_selector:
            raise ValueError(f"--k8s-pod-selector {settings.k8s_pod_selector!r} must contain {{job}}: "
                             "without it the pods of every job on the node would be deleted")
        return KubernetesActuator(KubernetesConfig(settings.k8s_namespace, settings.k8s_pod_selector,
                                                   settings.kubeconfig, None, settings.timeout_s))
    if settings.kind == "script":
        return ScriptActuator(ScriptConfig(settings.command, settings.timeout_s))
    raise ValueError(f"unknown actuator {settings.kind!r} (one of {', '.join(ACTUATORS)})")
