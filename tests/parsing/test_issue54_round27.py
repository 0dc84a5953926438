"""Issue 54 round 27: what fired on the ordinary lines of whole real logs (tests/fixtures/whole_logs,
bench/results_whole_logs.md), each quieted by a property of the line, beside the same program's or rule's
fault line that still acts (docs/rules.md, round 27).

The quiet lines are the whole logs' own, as the parser reads them (a dataset's added columns taken off as
the manifest's ``strip`` does). The fault lines are corpus rows (tests/fixtures/log_corpus, provenance
there), rules' examples or public files from the search index (its id in the comment).
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting, classes, events

_QUIET = [
    # BGL's RAS log: its severity column (FATAL) before the machine-check register's fields padded with dots to
    # their values (bgl_ras lines 207 and 261; the dataset marks both non-alert). They evicted.
    (
        "1118767283 2005.06.14 R20-M1-N3-C:J14-U01 2005-06-14-09.41.23.815131 R20-M1-N3-C:J14-U01 RAS KERNEL FATAL "
        "machine check: i-fetch......................0",
        "kernel",
    ),
    (
        "1118771085 2005.06.14 R27-M1-ND-C:J09-U01 2005-06-14-10.44.45.851799 R27-M1-ND-C:J09-U01 RAS KERNEL FATAL "
        "machine check enable..............0",
        "kernel",
    ),
    # a floating-point register's value alone, the same dump's (bgl_ras line 1990): the model read kernel
    (
        "1135579635 2005.12.25 R62-M1-NA-C:J04-U01 2005-12-25-22.47.15.963417 R62-M1-NA-C:J04-U01 RAS KERNEL FATAL "
        "fpr29=0xffffffff ffffffff ffffffff ffffffff",
        "kernel",
    ),
    # login programs' connection words (linux_syslog line 553, thunderbird line 75): the model read storage
    (
        "Jun 30 20:53:04 combo klogind[19274]: Authentication failed from 163.27.187.39 (163.27.187.39): "
        "Software caused connection abort ",
        "kernel",
    ),
    ("Nov 9 12:01:19 #8#/#8# sshd[19023]: connection lost: 'Connection closed.'", "kernel"),
    # ntpd's routine step, under a second (thunderbird line 460; index id 57141463775)
    ("Nov 9 12:04:25 local@tbird-admin1 ntpd[1815]: time reset +0.182379 s", "kernel"),
    ("Jun 28 22:28:01 mb9fe ntpd[5367]: time reset +0.225678 s", "kernel"),
    # the kubelet's start-up state before its first relist, 4 s after its first line (kubelet line 897)
    (
        "E0120 11:42:15.400230    4787 kubelet.go:1765] skipping pod synchronization - [container runtime status check "
        "may not have completed yet, PLEG is not healthy: pleg has yet to be successful]",
        "nccl",
    ),
]


@pytest.mark.parametrize(("line", "source"), _QUIET)
def test_an_ordinary_line_of_a_whole_log_is_quiet(line: str, source: str) -> None:
    assert acting(line, source) == []


def test_a_switchs_temperature_is_no_gpus() -> None:
    # LANL's node-event log, a gige switch's sensor (hpc_node_events line 722, labelled `other`: an alert of no
    # class of ours): the model read gpu_thermal, naming no GPU
    assert "gpu_thermal" not in classes("2561239 gige4 gige temperature 1073375350 1 critical")


_STILL_ACTS = [
    # a machine check as a platform's error log and the kernel's panic say it (a rule's example; index id 32556093930)
    (
        "LOG: Uncorrectable Machine Check Exception (Board 0, Processor 1, APIC ID 0x00000010, Bank 0x00000005, "
        "Status 0xBA000000'00400405, Address 0x00000000'00000000, Misc 0x00000000'00004280)",
        "kernel",
        "kernel",
    ),
    ("[  144.156140] Kernel panic - not syncing: Fatal machine check", "kernel", "kernel"),
    # ntpd stepping the clock by seconds (index ids 56742521052, an Ubuntu forum thread; 56864158537)
    ("Oct  6 19:51:23 TPHADOOP06 ntpd[17271]: time reset +99.339460 s", "kernel", "clock_skew"),
    ("Jan 28 21:35:27 AMD-UB804 ntpd[6617]: time reset +2.325616 s", "kernel", "clock_skew"),
    # the kubelet's PLEG gone stale, alone and quoted by the same 'Skipping pod synchronization' (corpus rows:
    # kubernetes/kubernetes#77728, aws-samples/eks-workshop-v2#447)
    ("PLEG is not healthy: pleg was last seen active 3m3.928932625s ago; threshold is 3m0s", "nccl", "node_silent"),
    (
        'Apr 13 10:53:52 ip-10-42-10-121 kubelet: E0413 10:53:52.844381    3263 kubelet.go:2055] "Skipping pod '
        'synchronization" err="PLEG is not healthy: pleg was last seen active 2h33m12.704970756s ago; threshold is 3m0s"',
        "nccl",
        "node_silent",
    ),
    # sshd's own process stuck in the kernel is still the kernel's (corpus row, imq/linuximq#8)
    ("[  520.451222] NMI watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [sshd:2645]", "kernel", "kernel"),
    # the model's guesses that name their class: a journal aborted on a disk, an oops (corpus rows), a GPU's
    # temperature (ValveSoftware/Proton#8028)
    ("[21628.545380] Aborting journal on device sdb1-8.", "kernel", "storage"),
    ("[135992.726639] Unable to handle kernel NULL pointer dereference at virtual address 0000000c", "kernel", "kernel"),
    (
        "Aug 27 01:11:45 arch kernel: amdgpu 0000:03:00.0: amdgpu: ERROR: GPU over temperature range(SW CTF) detected!",
        "kernel",
        "gpu_thermal",
    ),
]


@pytest.mark.parametrize(("line", "source", "fault"), _STILL_ACTS)
def test_the_same_programs_fault_still_acts(line: str, source: str, fault: str) -> None:
    assert fault in {e.data.get("fault") for e in acting(line, source)}


# ---- fresh47-48 mined (docs/rules.md, round 27) ----

_HEALTHY_BESIDE = [
    # i40e's port beside its refused PTP clock (fresh47, appneta/tcpreplay#183), and the same refusal on another port
    # (the function number changed)
    (
        "Jun  3 09:03:27 x710sbprobe kernel: i40e 0000:08:00.1: eth9: NIC Link is Up 10 Gbps Full Duplex, Flow Control: None",
        "kernel",
    ),
    ("Jun  3 09:03:27 x710sbprobe kernel: i40e 0000:08:00.0: PTP clock register failed: -16", "kernel"),
    # NVRM's lookup check for a MIG subscription a client does not hold (fresh48, NVIDIA/dcgm-exporter#657), another stamp
    (
        "[ 5021.377410] NVRM: nvCheckOkFailedNoLog: Check failed: Requested object not found [NV_ERR_OBJECT_NOT_FOUND] "
        "(0x00000057) returned from gisubscriptionGetGPUInstanceSubscription(pRsClient, RES_GET_HANDLE(pSubdevice), "
        "&pGPUInstanceSubscription) @ kernel_mig_manager.c:3091",
        "kernel",
    ),
    # mcelog's start-up notices beside its status decode (fresh47, andikleen/mcelog#73)
    ("mcelog: failed to prefill DIMM database from DMI data", "kernel"),
    ("mcelog: mcelog read: No such device", "kernel"),
    # clustermgtd's INFO lines beside its instance check (fresh47, aws/aws-parallelcluster#2407)
    (
        "2021-01-29 14:43:30,448 - [slurm_plugin.clustermgtd:_maintain_nodes] - INFO - Following nodes are currently in "
        "replacement: (x0) []",
        "nccl",
    ),
    # the kubelet's mount library at its info level (index id 3540398954)
    ("I0302 16:04:46.466612    2001 mount_linux.go:179] Detected OS with systemd", "nccl"),
    # the installer finishing (fresh48, NVIDIA/gpu-operator#129's driver container)
    (
        "Installation of the kernel module for the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version 450.80.02) "
        "is now complete.",
        "nccl",
    ),
    # a finite loss tensor printed alone, and a service that exits cleanly (the value and the code changed)
    ("tensor(0.2576, device='cuda:0')", "nccl"),
    ("comfyui exited with code 0", "nccl"),
]


@pytest.mark.parametrize(("line", "source"), _HEALTHY_BESIDE)
def test_a_healthy_line_beside_a_round27_form_is_quiet(line: str, source: str) -> None:
    assert acting(line, source) == []


_ROUND27_FORMS = [
    # NVRM's check naming the device still acts (a corpus row, index id 55070660121)
    (
        "2026-06-01T15:55:06.218447+03:00 isaac-Predator-PO5-650 kernel: NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost "
        "from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F)",
        "kernel",
        "gpu_lost",
    ),
    # dcgm-exporter's NVML start failure with go-nvml's text for another return (its format, index id 22426078174:
    # "Cannot init NVML library; err: %v" of nvml.ErrorString)
    ('time=2025-03-02T08:00:01.000Z level=ERROR msg="Cannot init NVML library; err: Driver Not Loaded"', "nccl", "gpu_lost"),
    # gpud's relayed Xid with another number and bus (its 'XID N(description) detected on PCI:...' form)
    ("XID 31(GPU memory page fault) detected on PCI:0000:1b:00", "nccl", "app_fault"),
    # go-nvml's lost-GPU return after another query (gpud's wording, the query changed)
    ("failed to get clock events for GPU-0b5c1a2e-6a7f-4c3d-9f1e-2d3c4b5a6978: ERROR_GPU_IS_LOST", "nccl", "gpu_lost"),
    # the kernel's RBD client: another device and the image request's own line (index id 70870101833 quotes dmesg)
    ("rbd: rbd0: read result -108", "kernel", "storage"),
    ("[ 8812.004411] rbd: rbd1: write at objno 12 0~65536 result -5", "kernel", "storage"),
    # RocksDB's checksum failure in a Ceph monitor's compaction (index id 32778976820)
    (
        "2021-11-02T09:04:55.964+0000 7f0cd6e20700  3 rocksdb: [db/db_impl_compaction_flush.cc:2660] Compaction error: "
        "Corruption: block checksum mismatch: expected 97447552, got 920580140  in "
        "/var/lib/ceph/mon/ceph-node1/store.db/057059.sst offset 12418567 size 27949",
        "nccl",
        "storage",
    ),
    # mount-utils' formatAndMount with another filesystem and device, mount's exit status 32 from another driver
    (
        'E0312 10:01:02.123456       7 mount_linux.go:232] format of disk "/dev/rbd3" failed: type:("xfs") '
        'target:("/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1/mount") options:("defaults")',
        "nccl",
        "storage",
    ),
    ("E1203 12:00:00.000001       1 mount_linux.go:150] Mount failed: exit status 32", "nccl", "storage"),
    # Ganesha's FSAL mapping when getrlimit failed (its other format, index id 118008497), NFS4's for another function
    (
        "03/10/2025 08:00:00 : epoch 6700aa11 : nfs-server : nfs-ganesha-12[svc_9] posix2fsal_error :FSAL :INFO :Mapping 5 "
        "to ERR_FSAL_IO, getrlimit failed",
        "nccl",
        "storage",
    ),
    (
        "03/10/2025 08:00:00 : epoch 6700aa11 : nfs-server : nfs-ganesha-12[svc_9] nfs4_Errno_verbose :NFS4 :CRIT :Error "
        "I/O error with error code 5 in nfs4_op_read converted to NFS4ERR_IO but was set non-retryable",
        "nccl",
        "storage",
    ),
    # clustermgtd's newer format (slurm_resources.py, index id 517915920: "... for node %s, node state: %s")
    (
        "2023-05-02 10:11:12,345 - [slurm_plugin.slurm_resources:is_backing_instance_valid] - WARNING - Node state check: "
        "no corresponding instance in EC2 for node queue1-dy-g5-3(10.0.1.7), node state: ALLOCATED+CLOUD",
        "nccl",
        "node_silent",
    ),
    # mcelog's decode behind its syslog tag
    ("Jun  3 09:03:27 node7 mcelog: Processor context corrupt", "kernel", "kernel"),
    # ZFS's pool failure ending in its failure mode, now that a needle lets the line in (another pool)
    (
        "error: Pool 'rpool' has encountered an uncorrectable I/O failure and the failure mode property for this pool is "
        "set to panic.",
        "kernel",
        "storage",
    ),
    # the Synapse graph compiler at its error level on another kernel, and compileGraph failing with another status
    (
        "[10:22:41.000101][GC                    ][error][tid:1A2B] Failed to load tpc kernel for node: TPC12, GUID: "
        "softmax_fwd_bf16. Got error: GLUE_FAILED",
        "nccl",
        "user_code",
    ),
    (
        "[10:22:41.000202][SYN_API       ][error][tid:1A2B] compileGraph: Failed to add recipe handle into "
        "Recipe-Singleton status 1[synFail]",
        "nccl",
        "user_code",
    ),
    # enroot refusing another malformed reference behind pyxis
    ("slurmstepd: error: pyxis:     [ERROR] Invalid image reference: nvcr.io#nvidia/pytorch:::23.10", "nccl", "user_code"),
    # the installer's closing line as it writes it itself (the log's path changed)
    (
        "ERROR: Installation has failed.  Please see the file '/var/log/nvidia-installer.log' for details.  You may find "
        "suggestions on fixing installation problems in the README available on the Linux driver download page at "
        "www.nvidia.com.",
        "nccl",
        "gpu_lost",
    ),
    # a NaN loss tensor printed alone on another device with its grad_fn
    ("tensor(nan, device='cuda:3', grad_fn=<NllLossBackward0>)", "nccl", "nan_loss"),
    # docker compose v2's service name and a SIGKILL'd exit
    ("trainer-1 exited with code 137", "nccl", "host_oom"),
]


@pytest.mark.parametrize(("line", "source", "fault"), _ROUND27_FORMS)
def test_a_round27_form_in_another_shape_is_read(line: str, source: str, fault: str) -> None:
    assert fault in classes(line, source)


def test_a_relayed_xid_keeps_its_number() -> None:
    # gpud's form: the number is NVIDIA's, so the event carries it (fresh47's row is Xid 79 on another bus)
    assert {e.data.get("xid") for e in events("XID 79(GPU has fallen off the bus) detected on PCI:0000:3b:00", "nccl")} == {79}
