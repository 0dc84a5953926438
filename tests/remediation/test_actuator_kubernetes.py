"""The Kubernetes actuator: the official client against a small local stand-in for the API server.

No real API server can run here (no container runtime, no kube-apiserver binary), so the test
serves recorded-format API objects (a Node and Pods as `kubectl get -o json` shows them, written
by hand) over HTTP, applies the client's strategic-merge patches to them the way the API server
does for these fields, and filters pods by the label and field selectors the client sends. The
client itself is the real one, configured from a kubeconfig file like in production.
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.util import find_spec
from urllib.parse import parse_qs, urlparse

import pytest

from faultlens.remediation.actuators.base import ActionRequest, carry_out
from faultlens.remediation.actuators.kubernetes import TAINT_KEY, KubernetesActuator, KubernetesConfig

# Skipped without the client, which is not imported here: the actuator imports it when it connects,
# in the one worker that runs these tests, not in every xdist worker that collects the file.
pytestmark = pytest.mark.skipif(find_spec("kubernetes") is None,
                                reason="the kubernetes client is not installed: pip install 'faultlens[kubernetes]'")

NODE = {
    "kind": "Node", "apiVersion": "v1",
    "metadata": {
        "name": "gpu-node-07", "uid": "5f0c7a58-3b7e-4a34-9c59-1d0f3f0e2a11", "resourceVersion": "884213",
        "creationTimestamp": "2026-10-02T08:14:51Z",
        "labels": {"kubernetes.io/hostname": "gpu-node-07", "kubernetes.io/os": "linux",
                   "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "node.kubernetes.io/instance-type": "p5.48xlarge"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
    },
    "spec": {
        "podCIDR": "10.244.7.0/24", "podCIDRs": ["10.244.7.0/24"], "providerID": "aws:///us-east-1a/i-0a1b2c3d4e5f",
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    },
    "status": {
        "capacity": {"cpu": "192", "memory": "2097152Mi", "nvidia.com/gpu": "8", "pods": "110"},
        "allocatable": {"cpu": "191450m", "memory": "2046000Mi", "nvidia.com/gpu": "8", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-22T23:30:02Z",
                        "lastTransitionTime": "2026-10-02T08:15:31Z", "reason": "KubeletReady",
                        "message": "kubelet is posting ready status"}],
        "addresses": [{"type": "InternalIP", "address": "10.0.7.21"}, {"type": "Hostname", "address": "gpu-node-07"}],
        "nodeInfo": {"machineID": "ec2a0d", "systemUUID": "ec2a0d", "bootID": "7d1e", "kernelVersion": "6.1.0-27-amd64",
                     "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://1.7.22",
                     "kubeletVersion": "v1.30.5", "kubeProxyVersion": "v1.30.5", "operatingSystem": "linux",
                     "architecture": "amd64"},
    },
}


def pod(name, job, node):
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "training", "uid": f"uid-{name}", "resourceVersion": "900001",
                     "creationTimestamp": "2026-11-22T22:00:00Z",
                     "labels": {"job-name": job, "batch.kubernetes.io/job-name": job,
                                "controller-uid": f"ctl-{job}", "batch.kubernetes.io/job-completion-index": "0"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"ctl-{job}",
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"nodeName": node, "restartPolicy": "Never",
                 "containers": [{"name": "trainer", "image": "registry.local/trainer:1.4",
                                 "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Running", "podIP": "10.244.7.19", "startTime": "2026-11-22T22:00:03Z"},
    }


class FakeApiServer:
    """Nodes and pods in memory, served like /api/v1; every request is kept for the asserts."""

    def __init__(self):
        self.nodes = {"gpu-node-07": copy.deepcopy(NODE)}
        self.pods = [pod("train-1-0-abcde", "train-1", "gpu-node-07"), pod("train-1-1-fghij", "train-1", "gpu-node-08"),
                     pod("other-0-klmno", "other", "gpu-node-07")]
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, obj):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _handle(self):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                server.requests.append({"method": self.command, "path": url.path, "query": parse_qs(url.query),
                                        "content_type": self.headers.get("Content-Type"), "body": body,
                                        "auth": self.headers.get("Authorization")})
                code, obj = server.respond(self.command, url.path, parse_qs(url.query), body)
                self._send(code, obj)

            do_GET = do_PATCH = do_DELETE = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def respond(self, method, path, query, body):
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            node = self.nodes.get(parts[3])
            if node is None:
                return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "message": f'nodes "{parts[3]}" not found', "reason": "NotFound",
                             "details": {"name": parts[3], "kind": "nodes"}, "code": 404}
            if method == "PATCH":
                # Strategic merge on these fields: a value replaces, null removes (taints has no merge key).
                for key, value in body.get("spec", {}).items():
                    if value is None:
                        node["spec"].pop(key, None)
                    else:
                        node["spec"][key] = value
            return 200, node
        if parts[:3] == ["api", "v1", "namespaces"] and parts[4:5] == ["pods"]:
            ns = parts[3]
            if method == "GET":
                labels = dict(s.split("=", 1) for s in query.get("labelSelector", [""])[0].split(",") if s)
                fields = dict(s.split("=", 1) for s in query.get("fieldSelector", [""])[0].split(",") if s)
                items = [p for p in self.pods if p["metadata"]["namespace"] == ns
                         and all(p["metadata"]["labels"].get(k) == v for k, v in labels.items())
                         and all(k == "spec.nodeName" and p["spec"]["nodeName"] == v for k, v in fields.items())]
                return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "900010"},
                             "items": items}
            if method == "DELETE":
                gone = [p for p in self.pods if p["metadata"]["name"] == parts[5]]
                self.pods = [p for p in self.pods if p["metadata"]["name"] != parts[5]]
                return (200, gone[0]) if gone else (404, {"kind": "Status", "code": 404, "reason": "NotFound"})
        return 404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": f"no route {path}"}

    def kubeconfig(self, path):
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "remediate", "namespace": "training"}}],
            "users": [{"name": "remediate", "user": {"token": "test-token"}}],
        }))
        return str(path)


@pytest.fixture
def api_server():
    server = FakeApiServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.fixture
def actuator(api_server, tmp_path):
    return KubernetesActuator(KubernetesConfig(namespace="training", kubeconfig=api_server.kubeconfig(tmp_path / "kc"),
                                               timeout_s=5))


def request(op, nodes=("gpu-node-07",), fault="nvlink"):
    return ActionRequest(op, "train-1", tuple(nodes), "d-41c2", fault, f"{fault}: evict", "evict")


def test_take_out_cordons_and_taints_keeping_other_taints(actuator, api_server):
    rec = carry_out(actuator, request("take_out"), "act")
    assert rec.outcome == "ok", rec.detail
    spec = api_server.nodes["gpu-node-07"]["spec"]
    assert spec["unschedulable"] is True
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in spec["taints"]
    assert {"key": TAINT_KEY, "value": "nvlink", "effect": "NoSchedule"} in spec["taints"]
    patch = next(r for r in api_server.requests if r["method"] == "PATCH")
    assert patch["content_type"] == "application/strategic-merge-patch+json"
    assert patch["query"] == {}  # no dry run, no field manager games
    assert {r["auth"] for r in api_server.requests} == {"Bearer test-token"}  # the kubeconfig's credentials
    # Twice (a redelivered decision): still one faultlens taint.
    assert carry_out(actuator, request("take_out", fault="gpu_lost"), "act").outcome == "ok"
    ours = [t for t in api_server.nodes["gpu-node-07"]["spec"]["taints"] if t["key"] == TAINT_KEY]
    assert ours == [{"key": TAINT_KEY, "value": "gpu_lost", "effect": "NoSchedule"}]


def test_requeue_deletes_only_the_jobs_pods_on_the_node(actuator, api_server):
    rec = carry_out(actuator, request("requeue"), "act")
    assert rec.outcome == "ok" and rec.detail == "deleted 1 pod(s) of train-1: train-1-0-abcde"
    listed = next(r for r in api_server.requests if r["method"] == "GET" and r["path"].endswith("/pods"))
    assert listed["path"] == "/api/v1/namespaces/training/pods"
    assert listed["query"]["labelSelector"] == ["job-name=train-1"]
    assert listed["query"]["fieldSelector"] == ["spec.nodeName=gpu-node-07"]
    assert sorted(p["metadata"]["name"] for p in api_server.pods) == ["other-0-klmno", "train-1-1-fghij"]
    nowhere = carry_out(actuator, request("requeue", nodes=()), "act")
    assert nowhere.outcome == "error" and "no node named" in nowhere.detail


def test_bring_back_uncordons_and_removes_only_our_taint(actuator, api_server):
    assert carry_out(actuator, request("take_out"), "act").outcome == "ok"
    rec = carry_out(actuator, request("bring_back"), "act")
    assert rec.outcome == "ok", rec.detail
    spec = api_server.nodes["gpu-node-07"]["spec"]
    assert spec["unschedulable"] is False
    assert spec["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_observe_only_sends_nothing(actuator, api_server):
    rec = carry_out(actuator, request("take_out"), "observe")
    assert rec.outcome == "skipped" and "observe-only" in rec.detail
    assert api_server.requests == []


def test_api_errors_and_an_unreachable_server_are_recorded(actuator, api_server, tmp_path):
    missing = carry_out(actuator, request("take_out", nodes=("gpu-node-99",)), "act")
    assert missing.outcome == "error" and "read node gpu-node-99: API server answered 404" in missing.detail
    api_server.httpd.shutdown()
    api_server.httpd.server_close()
    gone = carry_out(actuator, request("bring_back"), "act")
    assert gone.outcome == "error" and gone.detail.startswith("read node gpu-node-07: ")


def test_missing_credentials_is_a_clear_error(tmp_path):
    broken = KubernetesActuator(KubernetesConfig(kubeconfig=str(tmp_path / "no-such-kubeconfig")))
    rec = carry_out(broken, request("take_out"), "act")
    assert rec.outcome == "error" and "no Kubernetes credentials" in rec.detail
