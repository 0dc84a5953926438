"""The outside check, round 3: the peers' own test inputs, judged by faultlens as a user would.

nvidia-resiliency-ext tests its Flight Recorder attribution on real dumps of a 16-rank Megatron MoE
job with faults injected on two ranks (tests/outside/peer_inputs.py makes them faultlens traces:
one `stack`/`recorder_dump` a rank, as a trainer hook sends it, in a job whose steps stop). The
ranks the peer's analyser names must be the ones faultlens names, and no other machine evicted.
gpud (leptonai/gpud) tests its InfiniBand component on a real H100's /sys/class/infiniband tree:
faultlens's agent reads the same tree (tests/fixtures/outside/peers/gpud_ib_h100.json, three of its
nine devices) and the samples go through `faultlens analyze`: a healthy port stays quiet.

Found by this round (unit tests in tests/diagnosis/test_recorder_peer_dumps.py): recorder dumps
with no stack dump beside them were no dumps at all (a reattempt naming nobody); a faulted rank's
recorder, which stops retiring its calls, showed calls its peers had completed as still in flight,
so the group read as "joined but stuck" (a reattempt); an MoE all_to_all, whose members send
tensors of their own sizes by design, read as a mismatched collective (an alert on a trainer bug).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultlens.collectors.net_counters import read_snapshot, sample_data
from faultlens.events.envelope import Envelope
from faultlens.events.payloads import check_payload
from tests.outside.job_shape import Trace
from tests.outside.modes import assert_expect_files_kept, offline
from tests.outside.modes import checked as check_traces
from tests.outside.peer_inputs import CASES, PeerCase, write_all
from tests.outside.write_traces import write_table

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "outside" / "peers"


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict[str, PeerCase]]:
    out = tmp_path_factory.mktemp("outside-peers")
    return out, write_all(out)


def test_the_expect_files_kept_are_the_ones_the_writer_writes(written):
    assert_expect_files_kept(written[0], FIXTURES, CASES)


def test_the_peers_cases_are_what_its_logs_say(written):
    _, cases = written
    assert {n: (c.injected, c.named) for n, c in cases.items()} == {
        "gpu_error_1st": ([12, 14], [12]),
        "gpu_error_2nd": ([9, 14], [9, 14]),
        "lock_gil_1st": ([9, 14], [9, 14]),
        "lock_gil_2nd": ([10, 15], [10, 15]),
    }


@pytest.mark.long(6)
def test_every_peer_input_gives_what_its_analyser_says(written):
    out, _ = written
    results = check_traces(out / f"{name}.parquet" for name in CASES)
    assert sorted(results) == sorted(CASES)
    for name, r in results.items():
        assert r["ok"], (name, r["missing"], r["extra"], r["changed"])
        assert r["healthy_evicted"] == [], name


@pytest.mark.long(3)
@pytest.mark.parametrize("name", ["gpu_error_1st", "lock_gil_2nd"])
def test_the_hang_names_the_peers_ranks_from_their_recorders_alone(written, name):
    out, cases = written
    case = cases[name]
    [verdict] = [d for d in offline(out / f"{name}.parquet") if d["fault"] == "job_hang" and d["action"] != "capture_stacks"]
    assert verdict["ranks"] == case.named
    assert set(verdict["nodes"]) == case.nodes(case.named)
    assert "rule flight-recorder" in verdict["detail"] and "the recorder's word alone" in verdict["detail"]


def _gpud_tree(root: Path) -> Path:
    """gpud's H100 tree laid out under ``root`` as /sys is: ``root``/class/infiniband/<device>/..."""
    doc = json.loads((FIXTURES / "gpud_ib_h100.json").read_text())
    for rel, text in doc["files"].items():
        path = root / "class" / "infiniband" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _bump(root: Path, device: str, counter: str, by: int) -> None:
    path = root / "class" / "infiniband" / device / "ports" / "1" / "counters" / counter
    path.write_text(f"{int(path.read_text()) + by}\n")


def test_gpuds_h100_tree_reads_as_the_docs_say(tmp_path):
    root = _gpud_tree(tmp_path)
    first = read_snapshot(root, 1000.0)
    _bump(root, "mlx5_0", "port_rcv_data", 5_000_000_000)
    data = sample_data(first, read_snapshot(root, 1010.0))
    ports = {p["device"]: p for p in data["ports"]}
    assert {d: (p["link_layer"], p["state"], p["phys_state"], p["rate_gbps"]) for d, p in ports.items()} == {
        "mlx5_0": ("InfiniBand", "ACTIVE", "LinkUp", 400.0),
        "mlx5_1": ("InfiniBand", "ACTIVE", "LinkUp", 400.0),
        "mlx5_bond_0": ("Ethernet", "ACTIVE", "LinkUp", 200.0),
    }
    # Pegged at all ones, as narrow IB counters saturate: mlx5_1's 8-bit link_downed at 255, every
    # port's 4-bit excessive_buffer_overrun_errors at 15. No increase can be read from them.
    assert ports["mlx5_1"]["deltas"]["link_downed"] is None and ports["mlx5_0"]["deltas"]["link_downed"] == 0
    assert all(p["deltas"]["excessive_buffer_overrun_errors"] is None for p in ports.values())
    assert ports["mlx5_0"]["deltas"]["rx_bytes"] == 4 * 5_000_000_000  # 4-byte words, published in bytes
    check_payload(Envelope(ts=1_772_800_010.0, job="gpud", node="h100-0", source="net", kind="sample", data=data, id="n1"))


@pytest.mark.long(3)
def test_gpuds_h100_ports_under_traffic_say_nothing(tmp_path):
    """Three minutes of the tree's samples every 10 s, its data counters moving: nothing to say."""
    root = _gpud_tree(tmp_path / "sys")
    trace, base, prev = Trace(seed=7), 1_772_800_000.0, None
    trace.emit(
        base,
        "gpud-ib",
        "-",
        "job",
        "topology",
        {
            "tp": 1,
            "pp": 1,
            "dp": 4,
            "gpus_per_node": 4,
            "ranks": [{"rank": r, "node": "h100-0", "tp": 0, "pp": 0, "dp": r} for r in range(4)],
        },
    )
    for k in range(19):
        for device in ("mlx5_0", "mlx5_1", "mlx5_bond_0"):
            _bump(root, device, "port_rcv_data", 2_500_000_000)
            _bump(root, device, "port_xmit_data", 2_500_000_000)
        cur = read_snapshot(root, base + 10.0 * k)
        trace.emit(base + 10.0 * k, "gpud-ib", "h100-0", "net", "sample", sample_data(prev, cur))
        trace.emit(
            base + 10.0 * k + 1.0,
            "gpud-ib",
            "h100-0",
            "heartbeat",
            "beat",
            {"seq": k, "pids": [41_000 + g for g in range(4)], "sources": {"net": "ok"}},
        )
        prev = cur
    path = tmp_path / "gpud_ib.parquet"
    write_table(trace.rows(), path)
    assert [d for d in offline(path) if d["action"] not in ("none", "capture_stacks")] == []
