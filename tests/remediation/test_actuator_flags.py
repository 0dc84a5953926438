"""`--actuator` and its settings on `faultlens remediate` and `faultlens up`."""

from __future__ import annotations

import pytest

from faultlens.cli import build_parser
from faultlens.commands.remediate import actuator_settings, build_actuator
from faultlens.remediation.actuators.kubernetes import KubernetesActuator
from faultlens.remediation.actuators.slurm import SlurmActuator
from tests.in_process import faultlens_main


@pytest.mark.parametrize("command", ["remediate", "up"])
def test_flags_name_the_actuator_and_its_settings(command, monkeypatch):
    monkeypatch.delenv("FAULTLENS_ACTUATOR", raising=False)
    parse = build_parser().parse_args
    assert actuator_settings(parse([command])).kind == "none"
    slurm = build_actuator(parse([command, "--actuator", "slurm", "--slurm-requeue", "signal", "--slurm-signal", "TERM",
                                  "--actuator-timeout", "7"]))
    assert isinstance(slurm, SlurmActuator)
    assert (slurm.config.requeue, slurm.config.signal, slurm.config.timeout_s) == ("signal", "TERM", 7.0)
    k8s = build_actuator(parse([command, "--actuator", "kubernetes", "--k8s-namespace", "training",
                                "--k8s-pod-selector", "app=trainer,run={job}"]))
    assert isinstance(k8s, KubernetesActuator)
    assert (k8s.config.namespace, k8s.config.pod_selector) == ("training", "app=trainer,run={job}")
    assert not actuator_settings(parse([command, "--no-requeue-on-evict"])).requeue_on_evict


def test_the_environment_names_the_actuator(monkeypatch):
    monkeypatch.setenv("FAULTLENS_ACTUATOR", "script")
    monkeypatch.setenv("FAULTLENS_ACTUATOR_COMMAND", "/usr/local/bin/drain-node --cluster a")
    actuator = build_actuator(build_parser().parse_args(["remediate"]))
    assert actuator.name == "script" and actuator.argv == ["/usr/local/bin/drain-node", "--cluster", "a"]


@pytest.mark.parametrize("argv, message", [
    (["--actuator", "script"], "needs --actuator-command"),
    (["--actuator", "kubernetes", "--k8s-pod-selector", "app=trainer"], "must contain {job}"),
    (["--actuator", "slurm", "--slurm-signal", "USR1; reboot"], "slurm signal must be"),
    (["--actuator", "slurm", "--actuator-timeout", "0"], "timeout must be positive"),
])
def test_settings_that_cannot_work_stop_remediate_at_start(argv, message):
    # In this process (tests/in_process.py; test_remediate_keys runs remediate as a user does): four
    # interpreters started to print one refusal each.
    r = faultlens_main("remediate", *argv)
    assert r.returncode == 2 and message in r.stderr
