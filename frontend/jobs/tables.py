"""The jobs table: one django-tables2 table for "My jobs" (sorting and pagination in the query string)."""
import django_tables2 as tables
from django.utils.html import format_html

from frontend.templatetags.console import badge, cores, gpus, mib, when
from scheduler.models import JobStatus, TrainingJob


class JobTable(tables.Table):
    select = tables.CheckBoxColumn(accessor="pk", orderable=False, attrs={"th__input": {"data-select-all": "job",
                                   "aria-label": "Select all my pending jobs"}})
    id = tables.Column(verbose_name="#", linkify=("job", {"pk": tables.A("pk")}))
    name = tables.Column(linkify=("job", {"pk": tables.A("pk")}))
    department = tables.Column(verbose_name="Department", accessor="department__name", order_by="department__name")
    status = tables.Column()
    gpu = tables.Column(verbose_name="GPU model", accessor="gpu_model__name", order_by="gpu_model__name")
    gpus = tables.Column(verbose_name="GPUs", attrs={"td": {"class": "num nowrap"}, "th": {"class": "num"}})
    cpu_milli = tables.Column(verbose_name="CPU", attrs={"td": {"class": "num nowrap"}, "th": {"class": "num"}})
    memory_mib = tables.Column(verbose_name="Memory", attrs={"td": {"class": "num nowrap"}, "th": {"class": "num"}})
    queue_position = tables.Column(verbose_name="Position", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    score = tables.Column(order_by="score__total", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    latest_message = tables.Column(verbose_name="Why", orderable=False, attrs={"td": {"class": "reason"}})
    submitted_at = tables.Column(verbose_name="Age")

    class Meta:
        model = TrainingJob
        fields = ()
        sequence = ("select", "id", "name", "department", "status", "gpu", "gpus", "cpu_milli", "memory_mib",
                    "queue_position", "score", "latest_message", "submitted_at")
        order_by = ("-submitted_at",)
        empty_text = "No jobs here yet. Submit one with “Submit a job”, or widen the filters."
        attrs = {"id": "jobs"}

    def render_select(self, value, record):
        own_pending = record.submitter_id == self.request.user.pk and record.status == JobStatus.PENDING
        if not own_pending:
            return ""
        return format_html('<input type="checkbox" name="job" value="{}" aria-label="Select job {}">', value, record.name)

    def render_status(self, value, record):
        return badge(record.status, value)

    def render_gpu(self, value, record):
        assigned = record.assigned_gpu_model.name if record.assigned_gpu_model_id else None
        if assigned and assigned != value:
            return format_html("{} → <strong>{}</strong>", value or "—", assigned)
        return value or "—"

    def render_gpus(self, value, record):
        """A gang's request reads `4 × 8 A100` (workers × GPUs each, on the model it runs on, else the one asked)."""
        each = gpus(record.alloc_gpus if record.alloc_gpus is not None else value)
        if record.workers == 1:
            return each
        model = record.assigned_gpu_model or record.gpu_model
        return f"{record.workers} × {each} {model.name}" if model and record.gpus else f"{record.workers} × {each}"

    def render_cpu_milli(self, value, record):
        return _per_worker(record, cores(value))

    def render_memory_mib(self, value, record):
        return _per_worker(record, mib(value))

    def render_score(self, value):
        return f"{value['total']:,}" if value else "—"

    def render_submitted_at(self, value):
        return when(value)


def _per_worker(record: TrainingJob, amount: str) -> str:
    """A gang's CPU and memory are per worker, as its GPUs: `4 × 32 cores`."""
    return amount if record.workers == 1 else f"{record.workers} × {amount}"
