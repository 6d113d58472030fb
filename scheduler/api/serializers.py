"""Input and output shapes of the scheduler API. Validation of shapes only; rules live in services."""
from datetime import datetime, tzinfo
from decimal import Decimal

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api.jsontypes import JSONTypes
from core.api.serializers import NameField, UnsignedDecimalField, gpu_model_field
from core.models import Department
from scheduler.models import Framework, JobRun, Quota, Topology, TrainingJob
from scheduler.selectors import WorkerRow, latest_decision, placement_run, reservation_of, run_workers, short_sentence
from scheduler.submission import MAX_WORKERS


class GPUsField(UnsignedDecimalField):
    """GPUs a job asks for: a fraction of one GPU, or whole GPUs (the service refuses 1.5; the pattern and the number
    schemas state it)."""

    def pattern(self) -> str:
        whole, places = self.max_digits - self.decimal_places, self.decimal_places
        return rf"^(?:\d{{1,{whole}}}(?:\.0{{0,{places}}})?|0{{0,{whole}}}\.\d{{1,{places}}})$"

    def number_schemas(self) -> list[dict]:
        fraction = {"type": "number", "minimum": 0, "maximum": 1, "multipleOf": self.step()}
        whole = {"type": "number", "minimum": 2, "maximum": int(self.largest()), "multipleOf": 1}
        return [fraction, whole]  # disjoint (oneOf): 1 is a fraction of one GPU here


class FrameworkField(serializers.SlugRelatedField):
    """A framework by its "name-version" key, e.g. "pytorch-2.1"."""

    def __init__(self, **kwargs):
        super().__init__(slug_field="name", **kwargs)

    def to_internal_value(self, data):
        if "\x00" in str(data):
            self.fail("does_not_exist", slug_name="name-version", value=data)
        name, _, version = str(data).rpartition("-")
        try:
            return self.get_queryset().get(name=name, version=version)
        except Framework.DoesNotExist:
            self.fail("does_not_exist", slug_name="name-version", value=data)

    def to_representation(self, obj):
        return str(obj)


class FrameworkSerializer(JSONTypes, serializers.ModelSerializer):
    key = serializers.CharField(source="__str__", read_only=True)
    certified_on = gpu_model_field(many=True)

    class Meta:
        model = Framework
        fields = ["id", "key", "name", "version", "certified_on"]


class FrameworkCertificationSerializer(JSONTypes, serializers.ModelSerializer):
    certified_on = gpu_model_field(many=True)

    class Meta:
        model = Framework
        fields = ["certified_on"]


class QuotaSerializer(JSONTypes, serializers.ModelSerializer):
    department = NameField(slug_field="name", queryset=Department.objects.all())
    gpu_model = gpu_model_field(required=False, allow_null=True, default=None)
    resource = serializers.CharField(read_only=True, help_text='GPU model name, "cpu" (millicores) or "memory" (MiB).')
    own = UnsignedDecimalField(max_digits=14, decimal_places=3)
    borrowed = UnsignedDecimalField(max_digits=14, decimal_places=3, default=0)
    lend_limit = UnsignedDecimalField(max_digits=14, decimal_places=3, required=False, allow_null=True, default=None,
                                      help_text="What of its own it may lend (null: all of it)")

    class Meta:
        model = Quota
        fields = ["id", "department", "resource_kind", "gpu_model", "resource", "own", "borrowed", "lend_limit"]
        validators = []  # uniqueness is an upsert in quota_set, not an error


class QuotaAmountsSerializer(JSONTypes, serializers.Serializer):
    own = UnsignedDecimalField(max_digits=14, decimal_places=3)
    borrowed = UnsignedDecimalField(max_digits=14, decimal_places=3)
    lend_limit = UnsignedDecimalField(max_digits=14, decimal_places=3, required=False, allow_null=True)


class JobRunSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = JobRun
        fields = ["attempt", "node", "gpu_model", "started_at", "ended_at", "outcome"]


class TrainingJobInputSerializer(JSONTypes, serializers.Serializer):
    name = serializers.CharField(max_length=128)
    task_key = serializers.CharField(max_length=128, required=False, allow_blank=True, default="")
    department = NameField(slug_field="name", queryset=Department.objects.all())
    image = serializers.CharField(max_length=256)
    command = serializers.CharField()
    framework = FrameworkField(queryset=Framework.objects.prefetch_related("certified_on"))
    gpu_model = gpu_model_field(required=False, allow_null=True, default=None,
                                help_text="null or omitted: any GPU model the framework is certified on (placement "
                                          "chooses, and the job is charged on the model it gets)")
    gpus = GPUsField(max_digits=6, decimal_places=3, default=Decimal(0))  # DRF passes a default on as given
    cpu_milli = serializers.IntegerField(min_value=1)
    memory_mib = serializers.IntegerField(min_value=1)
    expected_duration_s = serializers.IntegerField(min_value=1, required=False, allow_null=True, default=None)
    workers = serializers.IntegerField(
        min_value=1, max_value=MAX_WORKERS, default=1,
        help_text="Identical workers started together or not at all (a gang when more than one); `gpus`, `cpu_milli` "
                  "and `memory_mib` are per worker, and a gang's workers ask for whole GPUs.")
    topology = serializers.ChoiceField(
        choices=Topology.choices, default=Topology.PACK,
        help_text="pack: the fewest nodes, of one block (`tidal.io/block`) if one holds the gang; spread: a node per "
                  "worker.")
    preemptible = serializers.BooleanField(
        default=True, help_text="false: never preempted, so admitted on own quota only, at every level of the quota "
                                "tree")


class JobRowsSerializer(serializers.ListSerializer):
    """A page of the job list, written from `job_rows()`'s plain rows: what DRF's field-by-field path gives for the
    jobs themselves (a test compares the two on every shape of job). That path took 1,100 field objects and 200
    time-zone lookups a page, a quarter of a list request's CPU under load (`bench api`)."""

    def to_representation(self, rows: list[dict]) -> list[dict]:
        tz = timezone.get_current_timezone()
        return [{
            "id": row["id"], "name": row["name"], "task_key": row["task_key"], "department": row["department_name"],
            "submitter": row["submitter_name"], "image": row["image"], "command": row["command"],
            "framework": row["framework_label"], "gpu_model": row["gpu_model_name"],
            "gpus": _GPUS.to_representation(row["gpus"]), "cpu_milli": row["cpu_milli"],
            "memory_mib": row["memory_mib"], "expected_duration_s": row["expected_duration_s"],
            "workers": row["workers"], "topology": row["topology"], "preemptible": row["preemptible"],
            "keep_request": row["keep_request"],
            "status": row["status"], "quota_kind": row["quota_kind"],
            "node": row["node_name"], "assigned_gpu_model": row["assigned_gpu_model_name"],
            "submitted_at": _when(row["submitted_at"], tz), "admitted_at": _when(row["admitted_at"], tz),
            "started_at": _when(row["started_at"], tz), "finished_at": _when(row["finished_at"], tz),
            "why": row["why"],
        } for row in rows]


_GPUS = serializers.DecimalField(max_digits=6, decimal_places=3)  # the model field's, as ModelSerializer maps it


def _when(value: datetime | None, tz: tzinfo) -> str | None:
    """DRF's DateTimeField output: ISO 8601 in the current time zone, UTC written "Z"."""
    if value is None:
        return None
    text = value.astimezone(tz).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class TrainingJobSerializer(serializers.ModelSerializer):
    """A job; many of them (the list) from `job_rows()`'s rows."""

    department = serializers.SlugRelatedField(slug_field="name", read_only=True)
    submitter = serializers.SlugRelatedField(slug_field="username", read_only=True)
    framework = serializers.StringRelatedField()
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    assigned_gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    node = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    why = serializers.SerializerMethodField(help_text="its latest decision in a few words (latest_decision.message on "
                                                      "the job's own page is the complete sentence)")

    class Meta:
        model = TrainingJob
        fields = [
            "id", "name", "task_key", "department", "submitter", "image", "command", "framework", "gpu_model",
            "gpus", "cpu_milli", "memory_mib", "expected_duration_s", "workers", "topology", "preemptible", "keep_request", "status",
            "quota_kind", "node", "assigned_gpu_model", "submitted_at", "admitted_at", "started_at", "finished_at",
            "why",
        ]
        list_serializer_class = JobRowsSerializer

    def get_why(self, job: TrainingJob) -> str | None:
        return short_sentence(latest_decision(job=job))


class KeepRequestSerializer(JSONTypes, serializers.Serializer):
    keep_request = serializers.BooleanField(help_text="true: bind the request as asked; false: right-size it")


class ScoreSerializer(serializers.Serializer):
    base = serializers.IntegerField(help_text="1,000,000 on own quota, 1,000 on borrowed quota")
    utilization = serializers.IntegerField(help_text="+20 meets the utilization target, -20 misses it, 0 no history")
    aging = serializers.IntegerField(help_text="min(n, 5) for the n-th 10 minutes waited beyond the first 10")
    total = serializers.IntegerField()


class RightsizedSerializer(serializers.Serializer):
    gpus = serializers.DecimalField(max_digits=6, decimal_places=3, source="alloc_gpus")
    cpu_request_milli = serializers.IntegerField(source="alloc_cpu_milli")
    cpu_limit_milli = serializers.IntegerField()
    memory_mib = serializers.IntegerField(source="alloc_memory_mib")


_THOUSANDTH = Decimal("0.001")


class WorkerSerializer(serializers.Serializer):
    rank = serializers.IntegerField(help_text="0 is the gang's rendezvous master (MASTER_ADDR, chief, trainer 0)")
    node = serializers.CharField(allow_null=True)
    pod = serializers.CharField()
    gpus = serializers.DecimalField(max_digits=6, decimal_places=3, help_text="GPUs it holds on its node")
    gpu_shares = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField(), min_length=2, max_length=2),
        help_text="[[GPU index on the node, share of it], …]")
    state = serializers.CharField(help_text="the worker's state; its run's outcome once the run ended")

    def to_representation(self, row: WorkerRow) -> dict:
        return {"rank": row.rank, "node": row.node, "pod": row.pod, "gpus": f"{row.gpus.quantize(_THOUSANDTH)}",
                "gpu_shares": [[index, share] for index, share in row.gpu_shares], "state": row.state}


class ReservationSerializer(serializers.Serializer):
    nodes = serializers.ListField(child=serializers.CharField(), help_text="the nodes held for the gang")
    start_at = serializers.DateTimeField(help_text="when their jobs are expected to end and the gang to start")


class LatestDecisionSerializer(serializers.Serializer):
    kind = serializers.CharField()
    reason = serializers.CharField()
    message = serializers.CharField()
    created_at = serializers.DateTimeField()


class TrainingJobDetailSerializer(TrainingJobSerializer):
    """A job with why it waits (queue position, score breakdown, latest decision) and what it was given."""

    runs = JobRunSerializer(many=True, read_only=True)
    score = serializers.SerializerMethodField()
    rightsized = serializers.SerializerMethodField(help_text="what was bound and charged; the request is kept above")
    latest_decision = serializers.SerializerMethodField()
    placement = serializers.SerializerMethodField(
        help_text="Every worker of the open run (else the latest), rank 0 first: one row for a one-worker job")
    reservation = serializers.SerializerMethodField(
        help_text="A waiting gang's reservation from the latest scheduling cycle; null when it holds none")

    class Meta(TrainingJobSerializer.Meta):
        fields = TrainingJobSerializer.Meta.fields + [
            "queue_position", "pending_reason", "score", "rightsized", "latest_decision", "placement", "reservation",
            "runs",
        ]
        list_serializer_class = serializers.ListSerializer  # one by one: the list's rows have none of these

    @extend_schema_field(ScoreSerializer(allow_null=True))
    def get_score(self, job: TrainingJob) -> dict | None:
        return job.score or None

    @extend_schema_field(RightsizedSerializer(allow_null=True))
    def get_rightsized(self, job: TrainingJob) -> dict | None:
        return RightsizedSerializer(job).data if job.alloc_gpus is not None else None

    @extend_schema_field(LatestDecisionSerializer(allow_null=True))
    def get_latest_decision(self, job: TrainingJob) -> dict | None:
        decision = latest_decision(job=job)
        return LatestDecisionSerializer(decision).data if decision else None

    @extend_schema_field(WorkerSerializer(many=True))
    def get_placement(self, job: TrainingJob) -> list[dict]:
        run = placement_run(list(job.runs.all()))  # prefetched with their nodes by the view
        return WorkerSerializer(run_workers(run=run, job_status=job.status), many=True).data if run else []

    @extend_schema_field(ReservationSerializer(allow_null=True))
    def get_reservation(self, job: TrainingJob) -> dict | None:
        held = reservation_of(job=job)
        return ReservationSerializer({"nodes": list(held.nodes), "start_at": held.start_at}).data if held else None


class QuotaUsageSerializer(serializers.Serializer):
    resource = serializers.CharField(help_text='GPU model name, "cpu" (millicores) or "memory" (MiB)')
    own = serializers.DecimalField(max_digits=14, decimal_places=3)
    own_used = serializers.DecimalField(max_digits=14, decimal_places=3)
    borrowed = serializers.DecimalField(max_digits=14, decimal_places=3)
    borrowed_used = serializers.DecimalField(max_digits=14, decimal_places=3)


class TreeQuotaSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(source="model")
    own = serializers.FloatField(help_text="its own quota (a parent's: a pool its subtree shares)")
    borrow_limit = serializers.FloatField(allow_null=True, help_text="null: unlimited")
    lend_limit = serializers.FloatField(allow_null=True, help_text="null: all of its own may be lent")
    subtree_own = serializers.FloatField(help_text="its own and every department's below it")
    used = serializers.FloatField(help_text="what its subtree's admitted and running jobs hold")
    pending = serializers.FloatField(help_text="what its subtree's waiting jobs ask for")
    lent = serializers.FloatField(help_text="what of its unused own other subtrees borrow")
    borrowed = serializers.FloatField(help_text="what it uses past its subtree's own")
    fair_share = serializers.FloatField(help_text="its fair share of the model's capacity with today's demand: own "
                                                  "first, the rest by weight")


class TreeNodeSerializer(serializers.Serializer):
    name = serializers.CharField()
    parent = serializers.CharField(allow_null=True, help_text="null: under the root")
    depth = serializers.IntegerField(help_text="0: under the root")
    weight = serializers.FloatField()
    leaf = serializers.BooleanField(help_text="only leaves admit jobs")
    fence = serializers.BooleanField(help_text="its subtree's work preempts only inside it")
    quotas = TreeQuotaSerializer(many=True, source="models")


class DepartmentTreeSerializer(serializers.Serializer):
    capacity = serializers.DictField(child=serializers.FloatField(), help_text="GPUs per model in the cluster")
    warnings = serializers.ListField(child=serializers.CharField(), help_text="own quotas that sum past the cluster")
    nodes = TreeNodeSerializer(many=True, help_text="depth first, children by name")
