"""Issue 54, round 8: the families fresh batches 7 and 8 showed missing (SAN and user-space storage
daemons, non-PyTorch frameworks' device OOM and CUDA errors, their NaN words, other collective
libraries, cluster daemons' clock checks, an application's GPU temperature limit), each by the format
and level its software prints, beside healthy look-alikes of the same family that must stay quiet.
Lines are real (fresh7/fresh8 rows or the provenance given); kernel lines are stamped past
BOOT_UPTIME_S or carry no clock."""

from __future__ import annotations

import pytest

from faultlens.parsing.timestamps import split_timestamp
from tests.parsing.test_issue54_fresh1_families import acting, kernel, trainer


def faults(events):
    return {e.data["fault"] for e in acting(events)}


def test_an_rsyslog_template_with_facility_and_severity_is_taken_off():
    # "<clock> <facility> <severity> <host> <tag>:" with the kernel's clock glued to its tag
    stamped = split_timestamp("2023-02-07 15:24:38.604 0 4 localhost kernel:[  267.326471] qla2xxx [0000:81:00.1]-801c:16: "
                              "Abort command issued nexus=16:0:0 -- 2003.", now=1.8e9)
    assert (stamped.mono, stamped.message) == (267.326471, "qla2xxx [0000:81:00.1]-801c:16: Abort command issued nexus=16:0:0 -- 2003.")


@pytest.mark.parametrize(("line", "fault", "parse"), [
    # TensorFlow / XLA / JAX / Paddle / CuPy / Theano / ggml / MXNet: the device ran out of memory
    ("ResourceExhaustedError (see above for traceback): OOM when allocating tensor with shape[256,112,112,64]", "user_code", trainer),
    ("  (0) Resource exhausted: failed to allocate memory", "user_code", trainer),
    ("Original error: RESOURCE_EXHAUSTED: Failed to allocate request for 176.00MiB (184549376B) on device ordinal 0", "user_code", trainer),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. "
     "Used 21.90G of 7.48G hbm. Exceeded hbm capacity by 14.42G.", "user_code", trainer),
    ("Out of memory error on GPU 0. Cannot allocate 25.002197MB memory on GPU 0, available memory is only 15.187500MB.", "user_code", trainer),
    ("0223 18:59:36.058634 11348 operator.cc:179] lookup_table raises an exception paddle::memory::allocation::BadAlloc,", "user_code", trainer),
    ("Exception in main training loop: out of memory to allocate 747110400 bytes (total 5722942464 bytes)", "user_code", trainer),
    ("Error: llama runner process has terminated: cudaMalloc failed: out of memory", "user_code", trainer),
    ("CUDA error 2 at /data/llama.cpp/ggml-cuda.cu:5509: out of memory", "user_code", trainer),
    ("mxnet.base.MXNetError: [16:26:09] src/operator/nn/./cudnn/cudnn_convolution-inl.h:713: Check failed: e == CUDNN_STATUS_SUCCESS "
     "(2 vs. 0) cuDNN: CUDNN_STATUS_ALLOC_FAILED", "user_code", trainer),
    ("[19:03:47] /home/deeper/mxnet/dmlc-core/include/dmlc/./logging.h:235: [19:03:47] src/storage/./pooled_storage_manager.h:62: "
     "Memory allocation failed.", "user_code", trainer),
    # Paddle's enforce on a CUDA call (public GitHub file, index id 59135192918)
    ("OSError: (External) CUDA error(2), out of memory.", "user_code", trainer),
    # their CUDA failures
    ("ExternalError: CUDA error(700), an illegal memory access was encountered.", "cuda_error", trainer),
    # TF's conv op when cuDNN could not start (public GitHub file, index id 15514221159)
    ("tensorflow.python.framework.errors_impl.UnknownError: Failed to get convolution algorithm. This is probably because cuDNN failed "
     "to initialize, so try looking to see if a warning log message was printed above.", "cuda_error", trainer),
    ("  (0) Internal: Blas GEMM launch failed : a.shape=(64, 50), b.shape=(50, 180), m=64, n=180, k=50", "cuda_error", trainer),
    ("2019-07-26 16:09:56.417068: F T:\\src\\github\\tensorflow\\tensorflow\\core\\common_runtime\\gpu\\gpu_event_mgr.cc:206] "
     "Unexpected Event status: 1", "cuda_error", trainer),
    ("C:\\a\\ollama\\ollama\\ml\\backend\\ggml\\ggml\\src\\ggml-cuda\\ggml-cuda.cu:73: CUDA error", "cuda_error", trainer),
    ("RuntimeError: [TM][ERROR] CUDA runtime error: API call is not supported in the installed CUDA driver "
     "/lmdeploy/src/turbomind/utils/allocator.h:163", "cuda_error", trainer),
    # NaN in each framework's words
    ("I0712 12:18:40.334496  3123 solver.cpp:228] Iteration 100, loss = -nan", "nan_loss", trainer),
    (" 99/100 [============================>.] - ETA: 3s - loss: nanEpoch 1/1000", "nan_loss", trainer),
    ("INFO:root:[Epoch 0][Batch 1], Speed: 24.210 samples/sec, CrossEntropy=2911234189311495764698741583380480.000, SmoothL1=nan",
     "nan_loss", trainer),
    ("Region 82 Avg IOU: nan, Class: nan, Obj: nan, No Obj: nan, .5R: 0.000000, .75R: 0.000000,  count: 1", "nan_loss", trainer),
    ("   1/1500 [..............................] - ETA: 0s - loss: 2.2759 - accuracy: 0.2188Batch 1: Invalid loss, terminating training",
     "nan_loss", trainer),
    ("Invalid nan value encountered in the backward pass of a C++-jit/pmap function. Calling the de-optimized backward pass.",
     "nan_loss", trainer),
    # HCCL and XLA's NCCL, NCCL's errors without its WARN prefix
    ("[rank1]:[E324 13:00:25.428092542 compiler_depend.ts:628] Some HCCL operations have failed or timed out. Due to the asynchronous "
     "nature of ASCEND kernels, subsequent NPU operations might run on corrupted/incomplete data.", "nccl_error", trainer),
    ("[rank1]: EI0006: [PID: 1292363] 2025-04-08-18:07:20.444.436 Getting socket times out. Reason: Remote Rank did not send the data "
     "in time. Please check the reason for the rank being stuck", "nccl_error", trainer),
    ("2023-04-16 15:44:18.280050: E external/xla/xla/pjrt/pjrt_stream_executor_client.cc:2432] Execution of replica 1 failed: INTERNAL: "
     "Failed to execute XLA Runtime executable: run time error: custom call 'xla.gpu.all_reduce' failed: "
     "external/xla/xla/service/gpu/nccl_all_reduce_thunk.cc:244: NCCL operation ncclGroupEnd() failed: unhandled cuda error.", "nccl_error", trainer),
    # (NCCL < 2.3's INFO trace "node1:54573:54696 [1] INFO bootstrap.cu:169 -> 2" is recorded, not acted
    # on, since round 9: test_issue54_round9.py)
    # an application's GPU temperature limit
    ("Temperature limit on GPU #3 reached, aborting...", "gpu_thermal", trainer),
    # SAN and user-space storage daemons by their formats
    ("May 11 16:40:10 k8s-worker-prod-ny5-1 multipathd[4554]: mpathy: sdac - tur checker reports path is down", "storage", kernel),
    ("  `- 19:0:4:13 sdcm 69:160  failed faulty running", "storage", trainer),
    ("Jan 03 03:57:32 fedora iscsid[40456]: iscsid: Received iferror -107: Transport endpoint is not connected.", "storage", kernel),
    # iscsid without its own prefix: a portal on iSCSI's port unreachable (public GitHub file, index id 48870391672)
    ("Jul  4 15:27:11 nodejs-200 iscsid: connect to 10.100.129.18:3260 failed (No route to host)", "storage", kernel),
    ("Dec 06 11:24:06 Chunk1 iscsid[794]: iscsid: connection20:0 login rejected: initiator failed authorization with target", "storage",
     kernel),  # public GitHub file, index id 7874304360
    ("Jan 28 15:06:24 ubuntusrv kernel: drbd windows10-boot windows10: PingAck did not arrive in time.", "storage", kernel),
    ("[57159.663869] drbd pgsql dmg28dbn1.mgmt.dmg28.dmg.net: meta connection shut down by peer.", "storage", kernel),
    ("[2025-08-08 21:53:47.527990 +0000] W [MSGID: 114031] [client-rpc-fops_v2.c:613:client4_0_statfs_cbk] 0-vol2-client-5: remote "
     "operation failed. [{errno=107}, {error=Transport endpoint is not connected}]", "storage", kernel),
    ('{"name":"root","levelname":"ERROR","severity":"ERROR","message":"fuse: *fuseops.FlushFileOp error: input/output error\\n",'
     '"timestampSeconds":1618078532,"timestampNanos":501263187}', "storage", kernel),
    ("Jun  5 16:35:46 teaasdu1 s3fs[2239]: curl.cpp:CurlProgress(564): timeout now: 1496694946, curl_times[curl]: 1496694885, "
     "readwrite_timeout: 60", "storage", kernel),
    ("RequestPerform(1595): ### CURLE_HTTP_RETURNED_ERROR", "storage", trainer),
    ("ls: cannot access  '/mnt': Transport endpoint is not connected", "storage", trainer),
    ("osd.510 1497 heartbeat_check: no reply from osd.11 since back 2016-04-28 20:49:42.088802", "storage", kernel),
    ("[71546.780092] zio pool=dpool vdev=/dev/disk/by-id/ata-WDC_WD40EFAX-68JH4N0_WD-WX21DB9KC4E6-part1 error=5 type=2 "
     "offset=4000776433664 size=4096 flags=180ac0", "storage", kernel),
    # Fibre Channel: the transport's remote port and the HBA driver's error handling
    ("[322689.699374]  rport-1:0-58: blocked FC remote port time out: removing rport", "storage", kernel),
    ("[  264.802400] qla2xxx [0000:81:00.0]-ffff:15: register_localport failed: ret=ffffffea", "storage", kernel),
    ("2023-02-07 15:24:38.604 0 4 localhost kernel:[  267.326480] qla2xxx [0000:81:00.1]-8009:16: DEVICE RESET ISSUED nexus=16:0:0 "
     "cmd=000000002e5c68c5.", "storage", kernel),
    # the GPU driver saying it cannot boot the GSP (NVIDIA/open-gpu-kernel-modules kernel_gsp.c)
    ("[ 9984.810007] NVRM: _kgspBootGspRm: (the GPU is likely in a bad state and may need to be reset)", "gpu_reset_required", kernel),
    # a kernel WARNING in a wired NIC's driver, a distribution's build tree before the path
    ("[  907.238995] WARNING: CPU: 0 PID: 187 at /build/linux-lts-vivid-GISjUd/linux-lts-vivid-3.19.0/drivers/net/ethernet/intel/i40e/"
     "i40e_main.c:1538 i40e_vsi_setup_queue_map+0x2b6/0x2d0 [i40e]()", "nic", kernel),
    # cluster daemons that measured this node's clock against their peers
    ("Jul 21 04:03:36 k2 etcd[6957]: the clock difference against peer f87fd78eb2cda07d is too high [29.294774649s > 1s]", "clock_skew", kernel),
    ("2018-11-16 19:39:35.954361 [WRN]  mon.1 10.0.3.47:6790/0 clock skew 0.060646s > max 0.05s", "clock_skew", kernel),
    ("     health HEALTH_WARN clock skew detected on mon.deis-03", "clock_skew", kernel),
])  # fmt: skip
def test_a_family_member_gets_its_class(line, fault, parse):
    assert fault in faults(parse(line)), line


@pytest.mark.parametrize(("line", "parse"), [
    # TF's allocator retrying, its OOM hint, Kaldi's allocator retrying: no failure yet
    ("2021-09-24 16:22:56.271936: W tensorflow/core/common_runtime/bfc_allocator.cc:243] Allocator (GPU_0_bfc) ran out of memory trying "
     "to allocate 2.60GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean that there could be "
     "performance gains if more memory were available.", trainer),
    ("Hint: If you want to see a list of allocated tensors when OOM happens, add report_tensor_allocations_upon_oom", trainer),
    ("WARNING (nnet3-train[5.4]:MallocPitchInternal():cu-allocator.cc:97) Allocation of 10204 x 6656 region failed: freeing some "
     "memory and trying again.", trainer),
    # gRPC's RESOURCE_EXHAUSTED for a message size is no device memory (public GitHub file, index id 71594285107)
    ("8 RESOURCE_EXHAUSTED: Received message larger than max (10485832 vs 4194304)", trainer),
    # TF's informational and warning start-up lines from its GPU runtime
    ("I tensorflow/stream_executor/cuda/cuda_gpu_executor.cc:936] successful NUMA node read from SysFS had negative value (-1), but "
     "there must be at least one NUMA node, so returning NUMA node zero", trainer),
    ("2021-09-24 16:22:49.534717: W tensorflow/stream_executor/gpu/redzone_allocator.cc:312] Internal: Invoking GPU asm compilation "
     "is supported on Cuda non-Windows platforms only", trainer),
    # finite losses and metrics, an empty region, dynamic loss scaling
    ("I1224 17:08:05.140704 31888 solver.cpp:87] Iteration 1000, loss = 3.57628e-08", trainer),
    (" 99/100 [============================>.] - ETA: 2s - loss: 0.2445Epoch 1/1000", trainer),
    ("INFO:root:Epoch[0] Batch [10]\tSpeed: 3.22 samples/sec\tCrossEntropy=4.200497\tSmoothL1=0.816728", trainer),
    ("Region 82 Avg IOU: -nan, Class: -nan, Obj: -nan, No Obj: 0.004668, .5R: -nan, .75R: -nan,  count: 0", trainer),
    ("2020-03-23 11:41:18 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: 0.00048828125", trainer),
    # hashcat's own temperature reading
    ("HWMon.Dev.#3.....: Temp: 88c Fan:  0% Util: 91% Core:1030MHz Mem:1000MHz Bus:4", trainer),
    # a path the checker finds up, reinstated, a ready path row (public GitHub files, index ids 30154253290, 18152328764)
    ("Feb 14 12:56:26 h16 multipathd[5225]: SAP_CJ1-PM: sdbc - tur checker reports path is up", kernel),
    ("Feb 14 12:56:26 h16 multipathd[5225]: 67:96: reinstated", kernel),
    ("Apr 22 16:54:55 jupiter iscsid: connection1:0 is operational after recovery (26 attempts)", kernel),
    ("    | `- 3:0:0:0 sdc 8:32 active ready  running", trainer),
    # iscsid's notes beside those errors (public GitHub files, index ids 7874304360, 3492092064)
    ("Dec 06 11:24:06 Chunk1 iscsid[794]: iscsid: Could not set session22 priority. READ/WRITE throughout and latency could be affected.",
     kernel),
    ("Oct 30 16:23:02 pbm-kube-0-w1 iscsid[1632]: iscsid: connecting to 169.254.0.2:3260", kernel),
    ("Oct 30 16:23:02 pbm-kube-0-w1 iscsid[1632]: iscsid: deleting a scheduled/waiting thread!", kernel),
    # DRBD's connection coming back (public GitHub file, index id 53195556756; fresh7)
    ("[15962703.554390] drbd one-vm-10154-disk-0 m8c8: conn( NetworkFailure -> Unconnected )", kernel),
    ("[15962704.555917] drbd one-vm-10154-disk-0 m8c8: conn( Unconnected -> Connecting )", kernel),
    ("Jan 28 15:04:31 ubuntusrv kernel: drbd windows10-boot windows10: conn( Connecting -> Connected ) peer( Unknown -> Secondary )", kernel),
    # GlusterFS at I, JuiceFS at WARNING, s3fs's level change at CRT and its 404 at INF, FUSE debug traces
    ("[2021-08-11 12:07:29.549586 +0000] I [socket.c:849:__socket_shutdown] 0-roi-prod-files-client-1: intentional socket shutdown(10)", kernel),
    ("2024/01/15 10:12:26.011329 juicefs[58135] <WARNING>: AOF is not enabled, you may lose data if Redis is not shutdown properly. "
     "[info.go:84]", kernel),
    ("[CRT] s3fs.cpp:set_s3fs_log_level(254): change debug level from [CRT] to [INF]", trainer),
    ("2024-06-03T15:39:26.037Z [INF]       curl.cpp:RequestPerform(2572): HTTP response code 404 was returned, returning ENOENT", trainer),
    ("fuse_debug: THE_TIME Op 0x0000a510        connection.go:490] -> OK ()", kernel),
    # Fibre Channel notices: the loop up, a fabric change, a reset that succeeded
    ("[322651.285683] qla2xxx [0000:02:00.0]-5013:1: RSCN database changed -- 0001 1100 0000.", kernel),
    ("2023-02-07 15:24:38.604 0 4 localhost kernel:[  267.326707] qla2xxx [0000:81:00.1]-800e:16: DEVICE RESET SUCCEEDED "
     "nexus:16:0:0 cmd=000000002e5c68c5.", kernel),
    ("[  264.276463] qla2xxx [0000:81:00.0]-500a:15: LOOP UP detected (8 Gbps).", kernel),
    # a wireless driver's WARNING is outside the job (public GitHub file, index id 49580068011)
    ("[  271.940647] WARNING: CPU: 6 PID: 0 at drivers/net/wireless/ath/ath11k/hal.c:818 ath11k_hal_srng_access_begin+0x31/0x40 [ath11k]",
     kernel),
])  # fmt: skip
def test_look_alikes_stay_quiet(line, parse):
    assert not acting(parse(line)), line


def test_a_resource_exhausted_error_without_memory_words_is_not_an_oom():
    # TF raises ResourceExhaustedError for a full disk too (dev corpus: trainer_storage)
    events = trainer("tensorflow.python.framework.errors_impl.ResourceExhaustedError: "
                     "models/singleton_classifiers/context.model/variables/variables_temp_d0c7555b")
    assert "user_code" not in faults(events)
