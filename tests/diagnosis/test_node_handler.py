"""The node stage's handler passes job-level events on to `summaries` as the bytes they came in,
unless it had to change them (an event placed by the broker's clock is re-encoded at its place)."""

from __future__ import annotations

import orjson

from faultlens.diagnosis.edge.node_consumer import NodeStageHandler
from faultlens.events import topics
from faultlens.events.bundle import Bundle, decode_bundled
from faultlens.events.envelope import decode, encode
from faultlens.streams.runner.loop import Record
from tests.diagnosis.diag_events import T0, beat, ev, step, topology


def _record(raw: bytes, offset: int = 0, **placed) -> Record:
    value = decode(raw)
    return Record("telemetry.train", 0, offset, b"n001", value, int(T0 * 1000), raw=raw,
                  event_ts=placed.pop("event_ts", value.ts), **placed)


def test_an_unchanged_event_goes_on_as_the_bytes_it_came_in():
    # Key order and spacing of a foreign sender: re-encoding would change them.
    wire = orjson.loads(encode(step(0.0, "n001", rank=3, n=8)))
    data = wire.pop("data")
    raw = b'{ "data": ' + orjson.dumps(data) + b', ' + orjson.dumps(wire)[1:]
    # (the other output: "no topology for job", none was sent)
    [out] = [o for o in NodeStageHandler().handle([_record(raw)]) if decode(o.value).source == "train"]
    assert out.topic == topics.SUMMARIES
    assert out.key == wire["job"].encode()
    assert out.value is raw


def test_an_event_placed_elsewhere_in_time_is_encoded_again_at_its_place():
    raw = encode(beat(0.0, "n002", seq=7))
    out = NodeStageHandler().handle([_record(raw, event_ts=T0 - 400.0, skew_s=400.0)])
    forwarded = [decode(o.value) for o in out if decode(o.value).source == "heartbeat"]
    assert [e.ts for e in forwarded] == [T0 - 400.0]
    assert all(o.value != raw for o in out)


def test_what_a_batch_passes_on_goes_as_one_bundle_per_job():
    raws = [encode(step(float(i), f"n00{i % 3}", rank=i, n=8, job=job)) for job in ("ja", "jb") for i in range(3)]
    topologies = [_record(encode(topology(3, gpus=1, tp=1, pp=1, job=job)), offset=90 + i)
                  for i, job in enumerate(("ja", "jb"))]
    out = NodeStageHandler().handle(topologies + [_record(raw, offset=i) for i, raw in enumerate(raws)])
    bundles = {o.key: decode_bundled(o.value) for o in out if isinstance(decode_bundled(o.value), Bundle)}
    assert set(bundles) == {b"ja", b"jb"}
    assert [encode(e) for k in (b"ja", b"jb") for e in bundles[k].events] == raws


def test_a_jobs_outputs_keep_their_order_around_a_window_or_finding():
    # steps of one node across a window boundary (10 s windows): the steps before the window's
    # close go out before the window, those after it after
    raws = [encode(step(float(t), "n001", rank=0, n=t, job="ja")) for t in (0, 4, 8, 12, 16)]
    known = _record(encode(topology(2, gpus=1, tp=1, pp=1, job="ja")), offset=99)
    out = NodeStageHandler().handle([known] + [_record(raw, offset=i) for i, raw in enumerate(raws)])
    seen = []
    for o in out:
        value = decode_bundled(o.value)
        for e in (value.events if isinstance(value, Bundle) else (value,)):
            seen.append((e.source, e.kind, e.ts - T0))
    assert [k for k in seen if k[0] == "train"] == [("train", "step", float(t)) for t in (0, 4, 8, 12, 16)]
    first_window = next(i for i, k in enumerate(seen) if k[1] == "window")
    assert all(k[2] < 10 for k in seen[:first_window] if k[0] == "train")
    assert all(k[2] >= 10 for k in seen[first_window:] if k[0] == "train")


def test_a_members_announcement_says_which_input_partitions_it_reads_and_the_job_stage_reads_it():
    from faultlens.diagnosis.edge.node_consumer import watermark_of

    [hello, word] = [NodeStageHandler().watermarks([0])(progress, (("telemetry.gpu:0", "telemetry.gpu:1"), 30))[0]
                     for progress in (float("-inf"), T0 + 60)]
    assert hello.topic == topics.SUMMARIES and hello.partition == 0

    def read(out):
        return watermark_of(Record(topics.SUMMARIES, 0, 0, None, decode(out.value), int(T0 * 1000)))

    got = read(hello)
    assert (got.watermark, got.reads, got.of) == (float("-inf"), ["telemetry.gpu:0", "telemetry.gpu:1"], 30)
    assert read(word).watermark == T0 + 60
    # Said badly, the word still counts for its watermark and says nothing of coverage.
    bad = orjson.loads(word.value)
    bad["data"]["of"] = "thirty"
    got = watermark_of(Record(topics.SUMMARIES, 0, 0, None, decode(orjson.dumps(bad)), int(T0 * 1000)))
    assert (got.watermark, got.reads, got.of) == (T0 + 60, None, None)


def test_a_members_word_says_whether_it_is_still_behind_on_its_input():
    from faultlens.diagnosis.edge.node_consumer import watermark_of

    announce = NodeStageHandler().watermarks([0])
    words = [watermark_of(Record(topics.SUMMARIES, 0, 0, None, decode(announce(T0, None, behind)[0].value), 0))
             for behind in (True, False)]
    assert [w.behind for w in words] == [True, False]


def _flap(node: str, at: float, offset: int, partition: int) -> list[Record]:
    """One InfiniBand flap as the kernel logs it: the cable out and the link down, then 6 s later
    the link back up."""
    up = 1234317.0 + at  # the kernel's own clock: seconds since boot
    lines = [(0.0, "mlx5_core 0000:5e:00.0: mlx5_port_module_event:1135:(pid 0): Port module event: module 0, "
                   "Cable unplugged"), (0.01, "mlx5_core 0000:5e:00.0 ibp94s0: Link down"),
             (6.0, "mlx5_core 0000:5e:00.0 ibp94s0: Link up")]
    out = []
    for i, (dt, line) in enumerate(lines):
        raw = encode(ev(at + dt, node, "kernel", "line", line=f"[{up + dt:.6f}] {line}"))
        out.append(Record(topics.KERNEL, partition, offset + i, node.encode(), decode(raw), 0, raw=raw,
                          event_ts=T0 + at + dt))
    return out


def _nic_findings(out) -> list:
    """NIC findings that blame (a tolerated flap is only a sympathetic signal for waves)."""
    return [e for o in out for e in [decode(o.value)]
            if e.kind == "finding" and e.data.get("fault") == "nic" and not e.data.get("sympathetic")]


def test_a_partition_that_moves_takes_its_nodes_state_with_it():
    """A member that takes a partition over reads its retained input again: the nodes' state it
    had from an earlier ownership must not count those events a second time (a single flap read
    twice was "2 NIC alerts in 5 min" and evicted a healthy node)."""
    from kafka.structs import TopicPartition

    handler = NodeStageHandler()
    flap = _flap("n001", 250.0, 0, partition=2)
    assert _nic_findings(handler.handle(flap)) == []  # one flap is tolerated
    handler.partitions_moved({TopicPartition(topics.KERNEL, 2), TopicPartition(topics.GPU, 2)})
    assert _nic_findings(handler.handle(flap)) == []  # read again after it came back: still one flap
    # state of the partitions that stayed is kept: a second flap on another partition's node counts
    other = _flap("n004", 250.0, 0, partition=5)
    handler.handle(other)
    handler.partitions_moved({TopicPartition(topics.KERNEL, 2)})
    assert [f.node for f in _nic_findings(handler.handle(_flap("n004", 270.0, 3, partition=5)))] == ["n004"]
