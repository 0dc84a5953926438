"""Kubernetes: cordon + taint a node, delete the job's pods on it, uncordon it again.

Uses the official ``kubernetes`` client (extra ``faultlens[kubernetes]``), configured from the
in-cluster service account or a kubeconfig. Taking a node out sets ``spec.unschedulable`` and adds
the taint ``faultlens.io/fault=<fault>:NoSchedule``; requeueing deletes the job's pods on the
taken-out nodes (found by a label selector, default ``job-name=<job>``, the label the Job
controller sets) so their controller makes new ones elsewhere; bringing back clears both, and
only the taint faultlens added: other taints on the node are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faultlens.remediation.actuators.base import ActionRequest, Actuator, ActuatorError

TAINT_KEY = "faultlens.io/fault"
# A taint value is a label value: 63 characters of [A-Za-z0-9_.-]; fault classes already are.
_TAINT_VALUE_MAX = 63


@dataclass(frozen=True)
class KubernetesConfig:
    namespace: str = "default"
    # {job} is replaced by the faultlens job name.
    pod_selector: str = "job-name={job}"
    kubeconfig: str | None = None
    context: str | None = None
    timeout_s: float = 10.0


def taint_value(fault: str) -> str:
    value = "".join(c if c.isalnum() or c in "-_." else "_" for c in fault)[:_TAINT_VALUE_MAX].strip("-_.")
    return value or "unknown"


def _taints_without_ours(node: Any) -> list[dict[str, Any]]:
    kept = []
    for t in (node.spec.taints or []) if node.spec else []:
        if t.key == TAINT_KEY:
            continue
        kept.append({k: v for k, v in (("key", t.key), ("value", t.value), ("effect", t.effect)) if v is not None})
    return kept


def load_api(config: KubernetesConfig) -> Any:
    """A CoreV1Api from the in-cluster account, else the kubeconfig; ActuatorError if neither."""
    try:
        from kubernetes import client
        from kubernetes import config as kconfig
    except ImportError:
        raise ActuatorError("the kubernetes client is not installed: pip install 'faultlens[kubernetes]'") from None
    try:
        if config.kubeconfig is None:
            try:
                kconfig.load_incluster_config()
            except kconfig.ConfigException:
                kconfig.load_kube_config(context=config.context)
        else:
            kconfig.load_kube_config(config_file=config.kubeconfig, context=config.context)
    except (kconfig.ConfigException, OSError) as exc:
        raise ActuatorError(f"no Kubernetes credentials (in-cluster or kubeconfig): {exc}") from None
    return client.CoreV1Api()


class KubernetesActuator(Actuator):
    name = "kubernetes"

    def __init__(self, config: KubernetesConfig = KubernetesConfig(), api: Any = None):
        self.config = config
        self._api = api

    @property
    def api(self) -> Any:
        if self._api is None:
            self._api = load_api(self.config)
        return self._api

    def _call(self, what: str, fn, *args, **kwargs) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, _request_timeout=self.config.timeout_s, **kwargs)
        except ApiException as exc:
            raise ActuatorError(f"{what}: API server answered {exc.status} {exc.reason}") from None
        except Exception as exc:  # urllib3 errors: refused, timed out, TLS
            raise ActuatorError(f"{what}: {type(exc).__name__}: {exc}") from None

    def _set_node(self, node: str, unschedulable: bool, taints: list[dict[str, Any]]) -> None:
        # Taints have no merge key, so the patch carries the whole list (read just before).
        body = {"spec": {"unschedulable": unschedulable, "taints": taints or None}}
        self._call(f"patch node {node}", self.api.patch_node, node, body)

    def take_out(self, request: ActionRequest) -> str:
        if not request.nodes:
            raise ActuatorError("no node named")
        done = []
        for node in request.nodes:
            current = self._call(f"read node {node}", self.api.read_node, node)
            taints = _taints_without_ours(current) + [
                {"key": TAINT_KEY, "value": taint_value(request.fault), "effect": "NoSchedule"}]
            self._set_node(node, True, taints)
            done.append(node)
        return f"cordoned and tainted {','.join(done)} ({TAINT_KEY}={taint_value(request.fault)}:NoSchedule)"

    def requeue(self, request: ActionRequest) -> str:
        if not request.nodes:
            raise ActuatorError("no node named: only the job's pods on taken-out machines are deleted")
        selector = self.config.pod_selector.format(job=request.job)
        deleted = []
        for node in request.nodes:
            pods = self._call(f"list pods of {request.job} on {node}", self.api.list_namespaced_pod,
                              self.config.namespace, label_selector=selector, field_selector=f"spec.nodeName={node}")
            for pod in pods.items:
                self._call(f"delete pod {pod.metadata.name}", self.api.delete_namespaced_pod,
                           pod.metadata.name, self.config.namespace)
                deleted.append(pod.metadata.name)
        if not deleted:
            return f"no pod matching {selector!r} on {','.join(request.nodes)} in {self.config.namespace}"
        return f"deleted {len(deleted)} pod(s) of {request.job}: {','.join(deleted)}"

    def bring_back(self, request: ActionRequest) -> str:
        if not request.nodes:
            raise ActuatorError("no node named")
        for node in request.nodes:
            current = self._call(f"read node {node}", self.api.read_node, node)
            self._set_node(node, False, _taints_without_ours(current))
        return f"uncordoned {','.join(request.nodes)} and removed {TAINT_KEY}"
