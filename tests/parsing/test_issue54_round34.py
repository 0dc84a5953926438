"""Issue 54, round 34 (fresh73 opened, G17): a cluster membership layer's failed member and unanswered probes, a job
killed for its missing heartbeat, the kubelet's eviction signals and volume mounts, XLA's INTERNAL status from the GPU
runtime, an ENOMEM named after its text, a GPU's memory exhausted in plain words, and "invalid device ordinal" by its
name in any API's spelling.

Every line is written for the test (other members, hosts, ids and numbers than the corpus rows), beside the
healthy look-alikes each reading must leave alone.
"""

from __future__ import annotations

import pytest

from tests.parsing.line_events import acting_verdicts, verdicts


def _acting(line: str, source: str = "nccl") -> list[tuple[object, object]]:
    """(fault, action) of each event of ``line`` that acts (the job's stream unless told)."""
    return acting_verdicts(line, source)


def _classes(line: str, source: str = "nccl") -> list[tuple[object, object]]:
    """(fault, action) of every event of ``line``, recorded or acting."""
    return verdicts(line, source)


@pytest.mark.parametrize(
    "line",
    [
        # the gossip failure detector's verdict, at the layer's INFO level: node_silent kept for the record
        "    2025/02/03 11:20:41 [INFO] memberlist: Marking worker-gpu-09 as failed, suspect timeout reached (1 peer confirmations)",
        "    2025/02/03 11:20:41 [INFO] serf: EventMemberFailed: worker-gpu-09 192.168.7.9",
        "    2025/02/03 11:20:42 [INFO] consul: member 'worker-gpu-09' failed, marking health critical",
        "INFO  [GossipStage:1] 2025-02-03 11:20:41,004 Gossiper.java:1102 - InetAddress /192.168.7.9 is now DOWN",
    ],
)
def test_a_membership_layers_failed_member_at_info_is_node_silent_recorded(line: str) -> None:
    assert _classes(line) == [("node_silent", "none")]


@pytest.mark.parametrize(
    "line",
    [
        "2025-02-03 11:20:41 WARN cluster: Marking node(s) as UNREACHABLE [Member(address = akka://train@10.1.0.4:2552, status = Up)]",
        "    2025/02/03 11:20:41 [WARN] memberlist: Marking worker-gpu-09 as failed, suspect timeout reached (0 peer confirmations)",
    ],
)
def test_a_failed_member_above_info_alerts_node_silent(line: str) -> None:
    assert _acting(line) == [("node_silent", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        # a member that left, joined or was refuted; a failed join; a reaped member
        "    2025/02/03 11:20:41 [INFO] serf: EventMemberLeave: worker-gpu-09 192.168.7.9",
        "    2025/02/03 11:20:41 [INFO] serf: EventMemberJoin: worker-gpu-09 192.168.7.9",
        "    2025/02/03 11:20:41 [WARN] memberlist: Refuting a suspect message (from: worker-gpu-02)",
        "    2025/02/03 11:20:41 [WARN] agent: member 'worker-gpu-09' failed to join: dial tcp 192.168.7.9:8301: i/o timeout",
        "    2025/02/03 11:20:41 [INFO] consul: member 'worker-gpu-09' reaped, deregistering",
        "INFO  [GossipStage:1] 2025-02-03 11:20:44,004 Gossiper.java:1102 - InetAddress /192.168.7.9 is now UP",
    ],
)
def test_members_that_left_joined_or_came_back_are_not_node_silent(line: str) -> None:
    assert ("node_silent", "none") not in _classes(line) and ("node_silent", "alert") not in _classes(line)


@pytest.mark.parametrize(
    "line",
    [
        "    2025/02/03 11:20:39 [ERR] memberlist: Failed fallback ping: read tcp 192.168.7.2:40112->192.168.7.9:8301: i/o timeout",
        "    2025/02/03 11:20:40 [ERR] raft: Failed to make RequestVote RPC to 192.168.7.9:8300: dial tcp 192.168.7.9:8300: connect: connection refused",
        "    2025/02/03 11:20:40 [ERR] raft: Failed to heartbeat to 192.168.7.9:8300: dial tcp 192.168.7.9:8300: connect: no route to host",
    ],
)
def test_a_membership_or_consensus_probe_nobody_answered_is_node_silent(line: str) -> None:
    assert _acting(line) == [("node_silent", "alert")]


@pytest.mark.parametrize(
    "line",
    [
        # the layer's own timers, and a probe that did not fail on the network
        '    2025/02/03 11:20:40 [WARN] raft: Heartbeat timeout from "" reached, starting election',
        "    2025/02/03 11:20:40 [WARN] raft: Election timeout reached, restarting election",
        "    2025/02/03 11:20:40 [ERR] raft: Failed to make RequestVote RPC to 192.168.7.9:8300: rpc error: unknown term",
    ],
)
def test_consensus_timers_and_non_network_failures_are_not_read_as_a_silent_peer(line: str) -> None:
    assert ("node_silent", "alert") not in _acting(line)


@pytest.mark.parametrize(
    ("line", "silent"),
    [
        ("This task was killed because a heartbeat was not received for 45 seconds.", True),
        ("Worker 12 marked dead: heartbeats were not received within 120 s", True),
        # the heartbeat words without a kill or a member, and Alluxio's storage worker (fresh70, storage)
        ("heartbeat not received yet, waiting for the first one", False),
        ("2025-02-03 11:20:41,003 ERROR DefaultBlockMaster - The worker 9(WorkerNetAddress{host=w9}) timed out after 600000ms without a heartbeat!", False),
    ],
)
def test_a_job_killed_for_a_heartbeat_not_received_is_node_silent(line: str, silent: bool) -> None:
    assert (("node_silent", "alert") in _acting(line)) is silent


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("Evicted\t\tThe node was low on resource: imagefs.", "storage"),
        ("Message:        The node was low on resource: nodefs. Container train was using 12Ki, which exceeds its request of 0.", "storage"),
        ("  Warning  EvictionThresholdMet  90s  kubelet, gpu-node-4  Attempting to reclaim ephemeral-storage", "storage"),
        ("  Warning  EvictionThresholdMet  90s  kubelet, gpu-node-4  Attempting to reclaim memory", "host_oom"),
        ("  Warning  FailedMount  4m (x3 over 9m)  kubelet  Unable to attach or mount volumes: unmounted volumes=[ckpt], unattached volumes=[ckpt]: timed out waiting for the condition", "storage"),
        ('  Warning  FailedAttachVolume  2m  attachdetach-controller  AttachVolume.Attach failed for volume "pvc-77a0" : timed out waiting for external-attacher', "storage"),
    ],
)
def test_the_kubelets_eviction_signals_and_failed_mounts_get_their_resources_class(line: str, fault: str) -> None:
    assert [f for f, _ in _acting(line)] == [fault]


@pytest.mark.parametrize(
    "line",
    [
        '  Normal   SuccessfulAttachVolume  2m  attachdetach-controller  AttachVolume.Attach succeeded for volume "pvc-77a0"',
        "  Normal   NodeHasSufficientMemory  5m  kubelet  Node gpu-node-4 status is now: NodeHasSufficientMemory",
        "  Normal   Scheduled  5m  default-scheduler  Successfully assigned ml/train-0 to gpu-node-4",
    ],
)
def test_the_kubelets_healthy_events_stay_quiet(line: str) -> None:
    assert _acting(line) == []


@pytest.mark.parametrize(
    "line",
    [
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: cuBLAS internal error",
        "jax.errors.JaxRuntimeError: INTERNAL: cuFFT internal error",
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to complete all kernels launched on stream 0x7f00aa01: stream is already in an error state",
    ],
)
def test_xlas_internal_status_from_the_gpu_runtime_is_cuda_error(line: str) -> None:
    assert ("cuda_error", "stop_time_diagnosis") in _acting(line)


def test_xlas_internal_status_from_nccl_keeps_ncclss_class() -> None:
    line = "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_api.cc:99: NCCL operation ncclGroupEnd() failed: unhandled system error"
    assert [f for f, _ in _acting(line)] == ["nccl_error"]


@pytest.mark.parametrize(
    ("line", "acts"),
    [
        ("ERROR: LoadError: connect: not enough memory (ENOMEM)", True),
        ("uv error: read: cannot allocate memory (ENOMEM)", True),
        # the name in a list of errnos, and another errno
        ("retryable errnos: EAGAIN, EINTR, ENOMEM", False),
        ("ERROR (unhandled task failure): write: broken pipe (EPIPE)", None),
    ],
)
def test_enomem_named_after_its_text_is_host_oom(line: str, acts: bool | None) -> None:
    got = ("host_oom", "restart") in _acting(line)
    assert got is bool(acts)


@pytest.mark.parametrize(
    ("line", "acts"),
    [
        ("Error: System is out of GPU and shared host memory", True),
        ("render failed: ran out of video memory", True),
        ("CUDA device went out of VRAM while building the BVH", True),
        # advice, a hedge, a quota
        ("Tip: lower the tile size to avoid running out of GPU memory", False),
        ("Large scenes may run out of GPU memory on 8 GB cards", False),
        ("the job is out of GPU quota for this project", False),
    ],
)
def test_a_gpus_memory_exhausted_in_plain_words_is_user_code(line: str, acts: bool) -> None:
    assert (("user_code", "rollback") in _acting(line)) is acts


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("  what():  scan: cudaErrorInvalidDevice: invalid device ordinal", "user_code"),
        ("RuntimeError: CUDA_ERROR_INVALID_DEVICE", "user_code"),
        ("hipErrorInvalidDevice at line 42", "user_code"),
        # a pointer passed wrong is the runtime's error, not a device number the process lacks
        ("  what():  copy: cudaErrorInvalidDevicePointer: invalid device pointer", "cuda_error"),
    ],
)
def test_invalid_device_ordinal_by_its_name_is_user_code(line: str, fault: str) -> None:
    assert fault in [f for f, _ in _acting(line)]


@pytest.mark.parametrize(
    "line",
    [
        "MPIDI_OFI_handle_cq_error(1080)....: OFI poll failed (ofi_events.c:1082:MPIDI_OFI_handle_cq_error:Input/output error - TRUNCATED)",
        " # na_ofi_cq_read(): fi_cq_readerr got err: 110(Connection timed out), prov_errno: -110(Connection timed out).",
    ],
)
def test_a_fabric_completion_in_error_is_the_collectives_error_whatever_its_errno(line: str) -> None:
    assert [f for f, _ in _acting(line)] == ["nccl_error"]


@pytest.mark.parametrize(
    ("line", "acts"),
    [
        ("Message[3] job cancelled - job preempted (node failure)", True),
        ("job 55120 requeued due to node failure on gpu-n17", True),
        # help text and a policy line about it
        ("If a job is requeued due to node failure, it keeps its place in the queue.", False),
        ("JobRequeue policy: requeue jobs killed by node failure", False),
    ],
)
def test_a_job_ended_by_a_node_failure_is_node_silent(line: str, acts: bool) -> None:
    assert (("node_silent", "alert") in _acting(line)) is acts


@pytest.mark.parametrize(
    ("line", "acts"),
    [
        ("Feb  3 11:20:41 wn12 cvmfs2[5512]: (sft.cern.ch) EIO (05): failed to open /lib/x.so", True),
        ("Feb  3 11:20:41 wn12 gcsfuse[771]: ReadFile: input/output error, fh.reader.ReadAt: readFull: timed out", True),
        ("Feb  3 11:20:41 wn12 blobfuse2[771]: [/mnt/data] LOG_ERR [block_cache.go (1050)]: BlockCache::download : failed to download block 7", True),
        # the same daemons' own notices, at their info level or saying no trouble
        ("Feb  3 11:20:41 wn12 blobfuse2[771]: LOG_INFO [mount.go (411)]: mount: Mounting blobfuse2 on /mnt/data", False),
        ("Feb  3 11:20:41 wn12 mount-s3[771]: [INFO] mountpoint_s3_fs::cli: mount-s3 1.16.2", False),
        ("Feb  3 11:20:41 wn12 cvmfs2[5512]: (sft.cern.ch) switching proxy from http://p1:3128 to http://p2:3128", False),
        # a storage daemon's failure of its own set-up, not of an operation on its data
        ("Feb  3 11:20:41 wn12 multipathd[990]: failed to increase buffer size", False),
        ("Feb  3 11:20:41 wn12 gcsfuse[771]: failed to set up metrics exporter: permission denied", False),
    ],
)
def test_a_fuse_storage_clients_error_in_the_jobs_stream_is_storage(line: str, acts: bool) -> None:
    assert (("storage", "alert") in _acting(line)) is acts


@pytest.mark.parametrize(
    "line",
    [
        # syslogd's broadcast to the terminals: the kernel's tag with no space before its message
        " kernel:LustreError: 2210:0:(file.c:301:ll_file_open()) LBUG",
        "kernel:LustreError: 2210:0:(lov_obj.c:88:lov_init()) ASSERTION( lsm != NULL ) failed: ",
    ],
)
def test_a_broadcast_kernel_line_is_read_by_its_drivers_tag(line: str) -> None:
    assert [f for f, _ in _acting(line, "kernel")] == ["storage"]


def test_a_broadcast_kernel_line_keeps_the_kernels_own_readings() -> None:
    assert [f for f, _ in _acting("kernel:Kernel panic - not syncing: Fatal exception in interrupt", "kernel")] == ["kernel"]
