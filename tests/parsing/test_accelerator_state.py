"""An accelerator's own statement that it hung, failed a reset, stopped answering or could not be brought up
(parsing.accelerator_state), read by the state grammar for a line no rule took: each form on a line written
here, each beside the healthy look-alike its guard is for."""

from __future__ import annotations

import pytest

from faultlens.parsing.registry import parser_for
from faultlens.parsing.state_grammar import read_state


def _read(line: str, source: str = "nccl") -> tuple[str, str, str | None] | None:
    got = read_state(line, line, source)
    return None if got is None else (got.fault, got.state, got.rule if got.quiet is None else f"{got.rule} (recorded)")


@pytest.mark.parametrize(
    ("line", "fault", "state", "look_alike"),
    [
        # it hung; not a hang detector's setting
        (
            "xe 0000:8a:00.0: [drm] GT1: engine hang on ccs2, resetting",
            "gpu_reset_required",
            "hung",
            "xe 0000:8a:00.0: [drm] GT1: engine hang check period set to 500 ms",
        ),
        # a reset of it failed; not a network port's reset
        (
            "vpu 0000:c1:00.0: device reset request failed, status 0x3",
            "gpu_reset_required",
            "failed a reset",
            "qede 0000:c1:00.0 port1: reset request failed, status 0x3",
        ),
        # its runtime resets it by its bus address; not the bare "Resetting GPU" a driver prints at every boot
        ("accel-rt[812]: [DRV:recover] Resetting 0000:41:00.0", "gpu_reset_required", "is being reset", "[drm] Resetting GPU"),
        # its firmware did not answer; not a remote call's reply an acronym names on a line of no device
        (
            "npu 0000:05:00.0: timed out waiting for MCU response",
            "gpu_reset_required",
            "stopped answering",
            "trainer: Timed out waiting for RPC response from worker 3",
        ),
        # it could not be brought up; not another kind of device that could not be opened
        (
            "accel-rt[9]: [INIT:probe] Failed to initialize devices, error:19",
            "gpu_lost",
            "could not be brought up",
            "hctosys: unable to open rtc device (rtc0)",
        ),
        ("runtime: 0 out of 4 chips initialized", "gpu_lost", "could not be brought up", "runtime: 4 out of 4 chips initialized"),
        (
            "thread 'main' error: DeviceInitError { index: 2 }",
            "gpu_lost",
            "could not be brought up",
            "runtime: device init took 2.1 s",
        ),
    ],
)
def test_each_statement_is_read_and_its_look_alike_is_not(line: str, fault: str, state: str, look_alike: str) -> None:
    assert _read(line) == (fault, state, "accelerator_state")
    assert _read(look_alike) is None


def test_a_start_that_will_be_retried_or_worked_is_not_read() -> None:
    assert _read("accel-rt[9]: Failed to initialize devices, retrying in 5 seconds") is None
    assert _read("npu 0000:05:00.0: device reset request failed once, reset completed") is None


def test_a_start_that_timed_out_is_the_device_absent_not_a_reset() -> None:
    # a firmware that went silent while the device was brought up: the device is not there for the job
    assert _read("  MCU Status: Timeout, 0 out of 2 initialized") == ("gpu_lost", "could not be brought up", "accelerator_state")


def test_a_kernel_line_is_an_alert_at_most_and_a_display_drivers_is_recorded() -> None:
    parser = parser_for("kernel")
    [event] = parser.feed("[  812.004211] npu 0000:05:00.0: timed out waiting for firmware response") + parser.flush()
    assert (event.kind, event.data["fault"], event.data["action"], event.data["rule"]) == (
        "suspect_line",
        "gpu_reset_required",
        "alert",
        "accelerator_state",
    )
    # i915 is a display driver the subsystem table keeps outside the job: its hang is the GPU's, recorded only
    parser = parser_for("kernel")
    [event] = parser.feed("[ 9120.113002] i915 0000:00:02.0: Resetting vcs1 after gpu hang") + parser.flush()
    assert (event.data["fault"], event.data["action"], event.data["rule"]) == ("gpu_reset_required", "none", "accelerator_state")
