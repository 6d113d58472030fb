"""A small typed client of Tidal's REST API: one method per endpoint the CLI uses, TypedDicts for what it reads.

Every path it calls is in ENDPOINTS and every TypedDict names its schema component in COMPONENTS: a test checks
both against the OpenAPI schema the server generates, so the client cannot drift from the API."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypedDict

import httpx

from tidal_cli import __version__

TIMEOUT = httpx.Timeout(30.0, connect=10.0)
PAGE = 1000  # the API's largest page


class Membership(TypedDict):
    department: str
    role: str


class Me(TypedDict):
    id: int
    username: str
    is_operator: bool
    memberships: list[Membership]


class Job(TypedDict):
    id: int
    name: str
    department: str
    submitter: str
    framework: str
    gpu_model: str | None
    gpus: str
    cpu_milli: int
    memory_mib: int
    workers: int
    status: str
    quota_kind: str
    node: str | None
    assigned_gpu_model: str | None
    submitted_at: str
    started_at: str | None
    finished_at: str | None
    why: str | None  # its latest decision in a few words


class Score(TypedDict):
    base: int
    utilization: int
    aging: int
    total: int


class Rightsized(TypedDict):
    gpus: str
    cpu_request_milli: int
    cpu_limit_milli: int
    memory_mib: int


class LatestDecision(TypedDict):
    kind: str
    reason: str
    message: str
    created_at: str


class Worker(TypedDict):
    rank: int
    node: str | None
    pod: str
    gpus: str
    state: str


class Reservation(TypedDict):
    nodes: list[str]
    start_at: str


class Run(TypedDict):
    attempt: int
    node: str | None
    gpu_model: str | None
    started_at: str
    ended_at: str | None
    outcome: str


class TreeQuota(TypedDict):
    gpu_model: str
    own: float
    borrow_limit: float | None
    lend_limit: float | None
    subtree_own: float
    used: float
    pending: float
    lent: float
    borrowed: float
    fair_share: float


class TreeNode(TypedDict):
    name: str
    parent: str | None
    depth: int
    weight: float
    leaf: bool
    fence: bool  # its subtree's work preempts only inside it
    quotas: list[TreeQuota]


class DepartmentTree(TypedDict):
    capacity: dict[str, float]
    warnings: list[str]
    nodes: list[TreeNode]


class JobDetail(Job):
    image: str
    command: str
    topology: str
    preemptible: bool
    keep_request: bool
    admitted_at: str | None
    queue_position: int | None
    pending_reason: str
    score: Score | None
    rightsized: Rightsized | None
    latest_decision: LatestDecision | None
    placement: list[Worker]
    reservation: Reservation | None
    runs: list[Run]


class ResourceRequest(TypedDict):
    gpus: float
    cpu_request_milli: int
    cpu_limit_milli: int
    memory_mib: int


class Advice(TypedDict):
    runs: int
    requested: ResourceRequest
    rightsized: ResourceRequest
    utilization_points: int


class JobProfile(TypedDict):
    advice: Advice | None


class Decision(TypedDict):
    id: int
    kind: str
    subject: str
    reason: str
    message: str
    data: dict[str, Any]  # a scaling decision's: its replicas and bands (rates as fractions)
    created_at: str


class Department(TypedDict):
    id: int
    name: str


class QuotaUsage(TypedDict):
    resource: str
    own: str
    own_used: str
    borrowed: str
    borrowed_used: str


class ResourceGroup(TypedDict):
    id: int
    name: str
    hardware_class: str
    gpu_model: str | None
    node_count: int
    lending: bool


class GroupAllocation(TypedDict):
    resource_group: str
    observed_at: str
    gpus: float
    gpus_allocated: float
    gpus_fragmented: float | None
    cpu_milli: int
    cpu_milli_allocated: int
    memory_mib: int
    memory_mib_allocated: int
    gpus_used: float | None  # really busy in used_minute; None while the profile pipeline is down
    used_minute: str | None


class Node(TypedDict):
    name: str
    resource_group: str
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    state: str


class Threshold(TypedDict):
    metric: str
    min_rate: float
    expect_rate: float
    max_rate: float


class ServiceGroup(TypedDict):
    index: int
    leader: str
    nodes: list[str]
    pods_ready: int
    ready: bool
    restarts: int
    pod_restarts: dict[str, int]


class Service(TypedDict):
    id: int
    name: str
    department: str
    gpu_model: str | None
    priority: int
    replicas: int
    min_replicas: int
    max_replicas: int
    gpus_per_replica: str
    cpu_milli_per_replica: int
    memory_mib_per_replica: int
    autoscaling: bool
    offline: bool
    thresholds: list[Threshold]
    replicas_changed_at: str | None
    created_at: str
    group_size: int
    group_restart_policy: str
    groups: list[ServiceGroup]
    ttft_p99_target_s: float | None
    tpot_p99_target_s: float | None
    kv_cache_target: float | None
    queue_target: float | None
    slo_ttft_s: float | None
    slo_tpot_s: float | None
    slo_min_gain: float | None


class Token(TypedDict):
    token: str


# What the client reads, by the schema component that describes it (tests/integration/test_cli_schema.py).
COMPONENTS: dict[type, str] = {
    Me: "Me", Membership: "MeMembership", Job: "TrainingJob", JobDetail: "TrainingJobDetail", Score: "Score",
    Rightsized: "Rightsized", LatestDecision: "LatestDecision", Worker: "Worker", Reservation: "Reservation",
    Run: "JobRun", JobProfile: "JobProfile", Advice: "Advice", ResourceRequest: "ResourceRequest",
    Decision: "Decision", Department: "Department", QuotaUsage: "QuotaUsage", ResourceGroup: "ResourceGroup",
    Node: "Node", Service: "InferenceService", Threshold: "ScalingThreshold", ServiceGroup: "ServiceGroup",
    DepartmentTree: "DepartmentTree", TreeNode: "TreeNode", TreeQuota: "TreeQuota",
}
# Every request the client makes: (method, path as the schema spells it).
ENDPOINTS = [
    ("post", "/api/auth/token/"), ("get", "/api/me/"),
    ("get", "/api/jobs/"), ("post", "/api/jobs/"), ("get", "/api/jobs/{id}/"), ("post", "/api/jobs/{id}/cancel/"),
    ("get", "/api/jobs/{id}/profile/"), ("get", "/api/jobs/{id}/logs/"), ("get", "/api/decisions/"),
    ("get", "/api/departments/"), ("get", "/api/departments/tree/"), ("get", "/api/departments/{id}/usage/"),
    ("get", "/api/resource-groups/"), ("get", "/api/nodes/"), ("get", "/api/inference-services/"),
    ("post", "/api/inference-services/"), ("get", "/api/inference-services/{id}/"),
    ("patch", "/api/inference-services/{id}/"),
    ("get", "/api/inference-services/{id}/scaling/"),
]


@dataclass
class ApiError(Exception):
    """Any failed request: the API's `{"message", "extra": {"fields"}}`, or a connection failure (status None)."""

    status: int | None
    message: str
    fields: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message


class Client:
    def __init__(self, url: str, token: str | None = None, *, transport: httpx.BaseTransport | None = None) -> None:
        headers = {"User-Agent": f"tidal-cli/{__version__}", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Token {token}"
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT, transport=transport)

    def close(self) -> None:
        self._http.close()

    # auth
    def token(self, username: str, password: str) -> str:
        body: Token = self._request("POST", "/api/auth/token/", json={"username": username, "password": password})
        return body["token"]

    def me(self) -> Me:
        return self._request("GET", "/api/me/")

    # jobs
    def jobs(self, *, limit: int, **filters: Any) -> list[Job]:
        return self._list("/api/jobs/", limit=limit, **filters)

    def job(self, job_id: int) -> JobDetail:
        return self._request("GET", f"/api/jobs/{job_id}/")

    def submit(self, payload: dict[str, Any]) -> JobDetail:
        return self._request("POST", "/api/jobs/", json=payload)

    def cancel(self, job_id: int) -> JobDetail:
        return self._request("POST", f"/api/jobs/{job_id}/cancel/")

    def job_profile(self, job_id: int) -> JobProfile:
        return self._request("GET", f"/api/jobs/{job_id}/profile/")

    def decisions(self, *, subject: str, limit: int) -> list[Decision]:
        return self._list("/api/decisions/", limit=limit, subject=subject, ordering="-created_at")

    def logs(self, job_id: int, *, run: int | None = None, worker: int | None = None, tail: int | None = None,
             follow: bool = False) -> Iterator[str]:
        """The job's log as text chunks, as the server sends them (live while following)."""
        params = {k: v for k, v in {"run": run, "worker": worker, "tail": tail}.items() if v is not None}
        if follow:
            params["follow"] = 1
        timeout = httpx.Timeout(30.0, connect=10.0, read=None) if follow else TIMEOUT
        try:
            with self._http.stream("GET", f"/api/jobs/{job_id}/logs/", params=params, timeout=timeout,
                                   headers={"Accept": "text/plain, application/json"}) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error(response)
                yield from response.iter_text()
        except httpx.HTTPError as exc:
            raise ApiError(None, f"cannot reach {self.url}: {exc}") from exc

    # departments, cluster, services
    def departments(self) -> list[Department]:
        return self._list("/api/departments/", limit=PAGE)

    def department_tree(self) -> DepartmentTree:
        return self._request("GET", "/api/departments/tree/")

    def usage(self, department_id: int) -> list[QuotaUsage]:
        return self._request("GET", f"/api/departments/{department_id}/usage/")

    def resource_groups(self) -> list[ResourceGroup]:
        return self._list("/api/resource-groups/", limit=10 * PAGE)

    def group_allocation(self) -> list[GroupAllocation]:
        """Each group's capacity and what every pod holds, as the lending loop last saw the cluster."""
        return self._request("GET", "/api/resource-groups/allocation/")

    def nodes(self) -> list[Node]:
        return self._list("/api/nodes/", limit=100 * PAGE)

    def services(self, **filters: Any) -> list[Service]:
        return self._list("/api/inference-services/", limit=10 * PAGE, **filters)

    def service(self, service_id: int) -> Service:
        return self._request("GET", f"/api/inference-services/{service_id}/")

    def create_service(self, payload: dict[str, Any]) -> Service:
        return self._request("POST", "/api/inference-services/", json=payload)

    def update_service(self, service_id: int, payload: dict[str, Any]) -> Service:
        return self._request("PATCH", f"/api/inference-services/{service_id}/", json=payload)

    def scaling(self, service_id: int, *, limit: int) -> list[Decision]:
        """The service's scaling decisions and alerts, newest first."""
        return self._list(f"/api/inference-services/{service_id}/scaling/", limit=limit)

    # plumbing
    def _list(self, path: str, *, limit: int, **params: Any) -> list[Any]:
        """Up to `limit` rows of a paginated list, page after page."""
        rows: list[Any] = []
        params = {k: v for k, v in params.items() if v not in (None, [], "")}
        while len(rows) < limit:
            page = self._request("GET", path, params={**params, "limit": min(PAGE, limit - len(rows)),
                                                      "offset": len(rows)})
            rows += page["results"]
            if not page["next"] or not page["results"]:
                break
        return rows

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(None, f"cannot reach {self.url}: {exc}") from exc
        if response.status_code >= 400:
            raise _error(response)
        return response.json()


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "message" in body:
        extra = body.get("extra") if isinstance(body.get("extra"), dict) else {}
        fields = extra.get("fields") if isinstance(extra.get("fields"), dict) else {}
        message = str(body["message"])
        if response.status_code == 404 and message == "Not found.":  # DRF's words for any missing object
            message = _missing(response.request.url.path) or message
        return ApiError(response.status_code, message, fields)
    reason = response.reason_phrase or "error"
    return ApiError(response.status_code, f"HTTP {response.status_code} {reason} from {response.request.url}")


_NOUNS = {"jobs": "job", "inference-services": "inference service", "departments": "department"}


def _missing(path: str) -> str | None:
    """The object a 404 was about, named ("job 42 not found ..."), from the request's path /api/<kind>/<id>/..."""
    parts = path.strip("/").split("/")
    if len(parts) >= 3 and parts[0] == "api" and parts[1] in _NOUNS:
        return f"{_NOUNS[parts[1]]} {parts[2]} not found (there is none, or it is not in your departments)"
    return None
