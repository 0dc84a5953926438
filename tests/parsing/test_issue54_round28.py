"""Issue 54 round 28: fresh49 and fresh50 mined. No healthy line of either fired; each miss is read by its
program's own format (docs/rules.md, round 28), and the same program's ordinary lines stay quiet.

The fault lines are another device, number, wording or prefix the same program prints (its source's format
string, cited), never the corpus row itself; the rows are in tests/fixtures/log_corpus/fresh49 and fresh50
(provenance there). The quiet lines are the same program's start-up, success or progress words.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting, classes

_ROUND28_FORMS = [
    # NVRM's adapter init failing where the journal dropped the 'NVRM: ' tag (fresh50: siderolabs/extensions#114),
    # another bus and the dmesg stamp
    ("[   11.204311] GPU 0000:3b:00.0: RmInitAdapter failed! (0x22:0x56:667)", "kernel", "gpu_lost"),
    # the nvidia module's probe failing (fresh50: siderolabs/extensions#227), another function, syslog prefix
    ("Jan  4 10:11:12 node7 kernel: nvidia: probe of 0000:41:00.0 failed with error -1", "kernel", "gpu_lost"),
    # ibv_devinfo's port field, another indentation (fresh50: deepseek-ai/DeepEP#60)
    ("\t\t\tstate:\t\t\tPORT_DOWN (1)", "kernel", "nic"),
    # nvme-tcp's timeout on an I/O queue, its error recovery and reconnect on other controllers (fresh50:
    # openebs/mayastor#1330, #1850; drivers/nvme/host/tcp.c's formats), and the PCIe driver's aborted reset (fresh50:
    # tyriis/home-ops#7472; drivers/nvme/host/pci.c) under another prefix
    ("[  912.337120] nvme nvme3: queue 2: timeout cid 0x4012 type 4 opcode 0x2 (I/O Cmd)", "kernel", "storage"),
    ("[Thu Mar  6 01:02:03 2025] nvme nvme7: starting error recovery", "kernel", "storage"),
    ("[ 5120.000001] nvme nvme1: Reconnecting in 20 seconds...", "kernel", "storage"),
    ("[    9.120301] nvme nvme0: Device not ready; aborting reset, CSTS=0x3", "kernel", "storage"),
    # ext4 finding a recorded error at mount (fresh50: canonical/microk8s#1884; fs/ext4/super.c), another device
    (
        "[   14.050112] EXT4-fs warning (device sda2): ext4_clear_journal_err:5213: Marking fs in need of filesystem check.",
        "kernel",
        "storage",
    ),
    # libata's failed command without its res half (fresh50: home-assistant/core#128987), a READ DMA EXT on ata3
    ("[ 2201.117400] ata3.00: cmd 25/00:08:00:10:a0/00:00:1d:00:00/e0 tag 7 dma 4096 in", "kernel", "storage"),
    # scsi_print_result at KERN_INFO under an RFC 5424 prefix (fresh49: longhorn/longhorn#2030), another disk and tag
    (
        "<6>1 2021-03-04T05:06:07.000001+00:00 node2 kernel - - - sd 2:0:0:0: [sdb] tag#11 FAILED Result: hostbyte=DID_OK "
        "driverbyte=DRIVER_SENSE cmd_age=3s",
        "kernel",
        "storage",
    ),
    # the device plugin's closing word (fresh50: NVIDIA/k8s-device-plugin#414; its main.go), under glog's prefix
    ("I0612 09:21:25.000000       1 main.go:101] No devices found. Waiting indefinitely.", "nccl", "gpu_lost"),
    # earlyoom at its limits (fresh49: rfjakob/earlyoom#80), other figures, and the newer wording of its main.c
    ("Low memory! mem avail: 120 of 64000 MiB (0 %) <= min 5 %, swap free: 10 of 2047 MiB (0 %) <= min 10 %", "nccl", "host_oom"),
    ("low memory! at or below SIGTERM limits: mem  9.87%, swap  4.12%", "nccl", "host_oom"),
    # a Flux broker's silent child (fresh49: flux-framework/flux-core#3400), another rank and count
    ("2021-02-01T10:00:00.000000Z broker.crit[3]: child 12 idle for 3 heartbeats", "nccl", "node_silent"),
    # TF's cuInit with a CUresult its table has no name for (fresh49: alpa-projects/alpa#452), 803 and another file line
    (
        "2023-01-02 03:04:05.678901: E tensorflow/compiler/xla/stream_executor/cuda/cuda_driver.cc:268] failed call to "
        "cuInit: UNKNOWN ERROR (803)",
        "nccl",
        "gpu_lost",
    ),
    # a CUDA program's driver call and its CUresult (fresh49: hashcat/hashcat#1), another call and code
    ("ERROR: cuMemAlloc() 2", "nccl", "cuda_error"),
    # device allocations refused: Cycles' CUDA queue (fresh49: vosen/ZLUDA#223) on another call and file, SynapseAI's
    # helper (fresh49: HabanaAI/Model-References#10) another size, ONNX Runtime's arena (fresh49: immich-app/immich#25165)
    (
        "Out of memory in cuMemAlloc(&device_pointer, size) (/src/intern/cycles/device/cuda/device_impl.cpp:712)",
        "nccl",
        "user_code",
    ),
    ("RuntimeError: FATAL ERROR :: MODULE:SYNHELPER workspace Allocation of size ::8589934592 failed!", "nccl", "user_code"),
    (
        "onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : "
        "Non-zero status code returned while running MatMul node. Name:'/blocks.3/MatMul' Status Message: "
        "bfc_arena.cc:376 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, "
        "onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size 1073741824",
        "nccl",
        "user_code",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _ROUND28_FORMS)
def test_a_round28_form_in_another_shape_is_read(line: str, source: str, fault: str) -> None:
    assert fault in classes(line, source)


_QUIET_BESIDE = [
    # the nvme-tcp host connecting and its queues (fresh50's healthy rows' kind: nvme-fabrics at connect)
    ("[ 2437.300112] nvme nvme4: creating 8 I/O queues.", "kernel"),
    ("[ 2437.310002] nvme nvme4: mapped 8/0/0 default/read/poll queues.", "kernel"),
    # ext4 mounting cleanly
    ("[    3.990001] EXT4-fs (dm-0): mounted filesystem with ordered data mode. Opts: (null)", "kernel"),
    # ibv_devinfo's active port
    ("\t\t\tstate:\t\t\tPORT_ACTIVE (4)", "kernel"),
    # the device plugin finding its GPUs and registering
    ("I0612 09:21:25.000000       1 main.go:88] Registered device plugin with Kubelet", "nccl"),
    # earlyoom's start-up report of its limits
    ("mem total: 5875 MiB, swap total:    0 MiB", "nccl"),
    ("sending SIGTERM when mem <= 10.00% and swap <= 10.00%,", "nccl"),
    # the same disk attached (no FAILED command)
    ("[  121.253080] sd 5:0:0:0: [sdd] Attached SCSI removable disk", "kernel"),
    # the nvidia module loading, not probing
    ("[    5.123456] nvidia: module license 'NVIDIA' taints kernel.", "kernel"),
]


@pytest.mark.parametrize(("line", "source"), _QUIET_BESIDE)
def test_a_healthy_line_beside_a_round28_form_is_quiet(line: str, source: str) -> None:
    assert acting(line, source) == []
