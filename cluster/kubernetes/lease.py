"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Every tick the worker renews the lease it holds, or takes one whose holder stopped renewing for `duration_s`.
Writes carry the resourceVersion read, so of two workers racing for an expired lease one gets a 409 and stays a
follower. A worker that cannot renew acts no more from its next tick on.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cluster.backend import BackendUnavailable
from cluster.kubernetes.objects import meta, timestamp


def _micro_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaseElector:
    api: client.ApiClient
    namespace: str
    name: str
    identity: str
    duration_s: int = 15
    request_timeout_s: float = 5.0

    def acquire(self, now: float) -> bool:
        """Hold the lease for the next duration_s (True), or learn that another worker does (False)."""
        coordination = client.CoordinationV1Api(self.api)
        try:
            try:
                lease = json.loads(coordination.read_namespaced_lease(
                    self.name, self.namespace, _preload_content=False, _request_timeout=self.request_timeout_s).data)
            except ApiException as error:
                if error.status != 404:
                    raise
                return self._create(coordination, now)
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            renewed = timestamp(spec.get("renewTime"))
            expired = now - renewed > int(spec.get("leaseDurationSeconds") or self.duration_s)
            if holder not in (None, "", self.identity) and not expired:
                return False
            changes = {"holderIdentity": self.identity, "renewTime": _micro_time(now),
                       "leaseDurationSeconds": self.duration_s}
            if holder != self.identity:
                changes["acquireTime"] = _micro_time(now)
                changes["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            coordination.patch_namespaced_lease(
                self.name, self.namespace,
                {"metadata": {"resourceVersion": meta(lease).get("resourceVersion")}, "spec": changes},
                _request_timeout=self.request_timeout_s)
            return True
        except ApiException as error:
            if error.status == 409:
                return False  # another worker wrote it first
            raise BackendUnavailable(f"lease {self.namespace}/{self.name}: {error.status} {error.reason}") from None
        except Exception as error:  # unreachable: we cannot know we lead, so we do not act
            raise BackendUnavailable(f"lease {self.namespace}/{self.name}: {error}") from None

    def _create(self, coordination: client.CoordinationV1Api, now: float) -> bool:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration_s,
                         "acquireTime": _micro_time(now), "renewTime": _micro_time(now), "leaseTransitions": 0}}
        coordination.create_namespaced_lease(self.namespace, body, _request_timeout=self.request_timeout_s)
        return True
