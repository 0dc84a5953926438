"""A known line behind a prefix no parser knows (parsing.realign): read again from the known format,
at the level the prefix stated, its uptime seen by the boot guard; lines written for each header form."""

from __future__ import annotations

import pytest

from faultlens.parsing import realign
from faultlens.parsing.registry import parser_for
from faultlens.parsing.timestamps import split_timestamp


def _read(source: str, line: str) -> list[tuple[str, str | None, str | None, bool | None]]:
    parser = parser_for(source)
    return [(e.kind, e.data.get("fault"), e.data.get("action"), e.data.get("boot")) for e in parser.feed(line) + parser.flush()]


@pytest.fixture
def unaligned(monkeypatch: pytest.MonkeyPatch):
    """The parsers as they were: no reading again."""

    def read(source: str, line: str):
        with monkeypatch.context() as m:
            m.setattr(realign, "candidates", lambda text, msg, programs=True: [])
            return _read(source, line)

    return read


# (source, a line behind a prefix, its kind and class, acting: True; the prefix says info or below: False)
CASES = [
    # Talos's "host: facility: level: [ISO]:" before the kernel's line
    ("kernel", "talos01: kern:     err: [2026-03-02T10:11:12.123456789Z]: Processor context corrupt", "edac", "kernel", True),
    ("kernel", "talos01: kern:    info: [2026-03-02T10:11:12.123456789Z]: Processor context corrupt", "edac", "kernel", False),
    # RFC 5424: its PRI's level (6: info)
    ("kernel", "<6>1 2026-03-02T10:11:12.123456+00:00 gpu-n12 mcelog - - - Processor context corrupt", "edac", "kernel", False),
    # a syslog line behind a file name (grep's output)
    ("kernel", "collector.log: Mar  2 10:11:12 gpu-n12 kernel: [ 8123.456789] Processor context corrupt", "edac", "kernel", True),
    # a glog header inside a syslog line behind a wrapper's label
    (
        "nccl",
        "[worker-3] Mar  2 10:11:12 gpu-n12 xla[42]: F0302 10:11:12.123456    42 autotuner.cc:1099] Non-OK-status: "
        "executable.status()",
        "exception",
        "user_code",
        True,
    ),
    # etcd's capnslog letter after its clock
    ("nccl", "2026-03-02 10:11:12.123456 E | ERROR: cuInit() 999", "cuda_error", "cuda_error", True),
    ("nccl", "2026-03-02 10:11:12.123456 D | ERROR: cuInit() 999", "cuda_error", "cuda_error", False),
    # c10d's bracketed header (month unpadded) behind torchrun's rank prefix
    ("nccl", "[rank3]:[E302 10:11:12.123456789 socket.cpp:489] ERROR: cuInit() 999", "cuda_error", "cuda_error", True),
    ("nccl", "[rank3]:[I302 10:11:12.123456789 socket.cpp:489] ERROR: cuInit() 999", "cuda_error", "cuda_error", False),
    # glog's I, a JSON object's and logfmt's level fields
    ("nccl", "I0302 10:11:12.123456    42 cuda.go:31] ERROR: cuInit() 999", "cuda_error", "cuda_error", False),
    ("nccl", '{"level":"info","msg":"ERROR: cuInit() 999"}', "cuda_error", "cuda_error", False),
    ("nccl", 'level=debug msg="ERROR: cuInit() 999"', "cuda_error", "cuda_error", False),
]


@pytest.mark.parametrize(("source", "line", "kind", "fault", "acting"), CASES)
def test_a_known_line_behind_a_prefix_is_read_at_the_prefix_level(unaligned, source, line, kind, fault, acting):
    assert unaligned(source, line) == []
    got = _read(source, line)
    assert [(k, f) for k, f, _, _ in got] == [(kind, fault)]
    assert (got[0][2] != "none") is acting


def test_an_uptime_stamp_in_the_cut_off_prefix_still_says_boot(unaligned):
    line = "collector.log: Mar  2 10:11:12 gpu-n12 kernel: [    4.456789] Processor context corrupt"
    assert unaligned("kernel", line) == []
    assert _read("kernel", line) == [("edac", "kernel", "none", True)]


def test_a_bracketed_number_in_a_message_is_no_kernel_clock():
    # printk pads the seconds to five: "[0.456789]" is a value in a message, not a header to cut at
    assert (
        realign.candidates(
            "bmc-sol: step [0.456789] Processor context corrupt", "bmc-sol: step [0.456789] Processor context corrupt"
        )
        == []
    )
    assert _read("kernel", "bmc-sol: step [0.456789] Processor context corrupt") == []


def test_no_cut_inside_a_message():
    # the crude probe cut at ": " and read 'Unknown Error"' as a CUDA error; a message field is read whole
    line = 'level=error msg="Cannot start plugin; err: Unknown Error"'
    assert [c.line for c in realign.candidates(line, split_timestamp(line).message)] == [
        "Cannot start plugin; err: Unknown Error"
    ]
    assert _read("nccl", line) == []


@pytest.mark.parametrize(("source", "line"), [
    ("kernel", "[ 8123.456789] NVRM: Xid (PCI:0000:41:00): 79, pid=1234, GPU has fallen off the bus."),
    ("nccl", "gpu-n3 | RuntimeError: CUDA error: an illegal memory access was encountered"),
])  # fmt: skip
def test_a_line_the_first_reading_took_is_not_read_again(monkeypatch, source, line):
    def never(text: str, msg: str, programs: bool = True):
        raise AssertionError("read again")

    monkeypatch.setattr(realign, "candidates", never)
    assert _read(source, line)


@pytest.mark.parametrize("source", ["kernel", "nccl"])
def test_a_line_read_again_is_counted_once(source):
    parser = parser_for(source)
    line = CASES[0][1] if source == "kernel" else CASES[5][1]
    assert parser.feed(line)
    assert (parser.stats.lines, parser.stats.recognised, parser.stats.skipped) == (1, 1, 0)
    assert not parser.feed("2026-03-02 10:11:12.123456 E | nothing to see here at all")
    assert (parser.stats.lines, parser.stats.recognised, parser.stats.skipped) == (2, 1, 1)


def test_no_traceback_opens_on_a_reading_again():
    # a traceback's head inside a JSON field would swallow the stream's next lines under another rank
    parser = parser_for("nccl")
    parser.feed('{"level":"error","msg":"Traceback (most recent call last):"}')
    assert [e.data.get("fault") for e in parser.feed("RuntimeError: CUDA error: an illegal memory access was encountered")] == [
        "cuda_error"
    ]


def test_a_programs_logger_level_is_not_the_kernels(monkeypatch):
    # a program's glog F line in a node's syslog: the kernel parser does not give it the kernel's err,
    # which would send it to the line model (the trainer parser reads the logger's message)
    line = "F0302 10:11:12.123456 4242 hl_cuda_device.cc:661] Check failed: cudaSuccess == cudaStat (0 vs. 77) Cuda Error: an illegal memory access"
    assert _read("kernel", line) == []
    everything = realign.candidates
    monkeypatch.setattr(realign, "candidates", lambda text, msg, programs=True: everything(text, msg))
    assert [f for _, f, _, _ in _read("kernel", line)] == ["cuda_error"]


def test_a_reading_again_keeps_the_rank_prefix():
    parser = parser_for("nccl")
    assert [e.data["rank"] for e in parser.feed("[rank3]:[E302 10:11:12.123456789 socket.cpp:489] ERROR: cuInit() 999")] == [3]


def test_a_warning_prefix_takes_back_a_guess_and_socket_words():
    # c10d's W header cut off: the process group's socket words at warning are a client's own retry, as on
    # a line that states its warning itself (the first reading drops them too)
    line = ("[rank3]:[W302 10:11:12.123456789 ProcessGroupNCCL.cpp:1662] [PG ID 0 Rank 3] Failed to check the flag on "
            "TCPStore, with error: Connection reset by peer")  # fmt: skip
    assert [c.form for c in realign.candidates(line[8:], line[8:])] == ["c10d"]
    assert _read("nccl", line) == []
