"""A short compute check on each GPU: the same matrix product (fixed seed) on every device,
each result compared with a float64 reference on the CPU and with the node's other devices.

A GPU with a broken SM, bad memory or a silently wrong kernel gives a different product while
the others agree. Without CUDA the check runs on the CPU (the fallback tests use), so the path
is the same everywhere.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from faultlens.collectors.checks.result import CheckResult, skipped

NAME = "compute"
TOLERANCE = 1e-3  # relative; float32 against float64 is ~1e-6, TF32 (which we switch off) ~1e-3


@dataclass(frozen=True)
class DeviceProduct:
    """What one device computed: its error against the reference and a checksum for peers."""

    device: str
    rel_error: float
    checksum: float
    error: str = ""  # the device raised (a CUDA error: ECC, launch failure, ...): it fails


Matmul = Callable[[str, Any, Any], Any]


def _matmul(device: str, a: Any, b: Any) -> Any:
    return a.to(device) @ b.to(device)


def compute_devices() -> list[str]:
    import torch

    if torch.cuda.is_available():
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cpu"]


def measure_products(devices: Sequence[str], *, size: int = 512, seed: int = 1234,
                     matmul: Matmul = _matmul) -> list[DeviceProduct]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # a TF32 product would differ from the reference by design
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(size, size, generator=g)
    b = torch.randn(size, size, generator=g)
    reference = a.double() @ b.double()
    scale = float(reference.abs().max())
    out = []
    for device in devices:
        try:
            c = matmul(device, a, b)
            if device.startswith("cuda"):
                torch.cuda.synchronize(device)
            c = c.double().cpu()
        except RuntimeError as exc:  # torch raises CUDA errors (ECC, illegal address, ...) as RuntimeError
            out.append(DeviceProduct(device, float("inf"), float("nan"), f"{type(exc).__name__}: {exc}"[:300]))
            continue
        err = float((c - reference).abs().max()) / scale
        out.append(DeviceProduct(device, err if err == err else float("inf"), float(c.sum())))
    return out


def judge_products(products: Sequence[DeviceProduct], tolerance: float = TOLERANCE) -> CheckResult:
    """Pure: a device fails when its product is off the reference or off its peers' median."""
    if not products:
        return skipped(NAME, "no device to compute on")
    ran = [p.checksum for p in products if not p.error]
    median = statistics.median(ran) if ran else 0.0
    spread = max(1.0, abs(median))
    bad = []
    for p in products:
        if p.error:
            bad.append(f"{p.device}: {p.error}")
        elif not p.rel_error <= tolerance:
            bad.append(f"{p.device}: product off the reference by {p.rel_error:.2e} (tolerance {tolerance:.0e})")
        elif len(ran) > 2 and abs(p.checksum - median) / spread > tolerance:
            bad.append(f"{p.device}: checksum {p.checksum:.6g} differs from its peers' {median:.6g}")
    if bad:
        return CheckResult(NAME, False, "; ".join(bad))
    worst = max(p.rel_error for p in products)
    return CheckResult(NAME, True, f"{len(products)} device(s) agree ({', '.join(p.device for p in products)}; "
                                   f"worst error {worst:.1e})")


def check_compute(devices: Sequence[str] | None = None, *, size: int = 512,
                  matmul: Matmul = _matmul, tolerance: float = TOLERANCE) -> CheckResult:
    try:
        import torch  # noqa: F401
    except ImportError:
        return skipped(NAME, "torch is not installed on this node")
    return judge_products(measure_products(devices or compute_devices(), size=size, matmul=matmul), tolerance)

