"""Actuators: how the remediation consumer acts on the scheduler (Slurm, Kubernetes, a script)."""

from faultlens.remediation.actuators.base import ActionRequest, Actuator, ActuatorError, NoActuator, carry_out
from faultlens.remediation.actuators.factory import ACTUATOR_ENV, ACTUATORS, COMMAND_ENV, ActuatorSettings, make_actuator
from faultlens.remediation.actuators.plan import plan

__all__ = ["ACTUATOR_ENV", "ACTUATORS", "COMMAND_ENV", "ActionRequest", "Actuator", "ActuatorError",
           "ActuatorSettings", "NoActuator", "carry_out", "make_actuator", "plan"]
