"""Create and edit an inference service with its scaling thresholds (the API's fields and service rules)."""
from django import forms
from django.core.validators import MinValueValidator

from colocation.models import InferenceService, ScalingThreshold
from colocation.policy.schedules import parse_weekdays
from core.models import Department, GPUModel


FIELDS = ["name", "department", "gpu_model", "priority", "autoscaling", "replicas", "min_replicas", "max_replicas",
          "gpus_per_replica", "cpu_milli_per_replica", "memory_mib_per_replica", "peak_start", "peak_end",
          "scale_to_zero_idle_min", "busy_signal", "offline", "manual_deploy", "vertical"]
POLICY_FIELDS = FIELDS[11:]
GROUP_FIELDS = ["group_size", "startup_s", "exclusive_topology", "max_surge", "max_unavailable", "group_restart_policy"]
# docs/concepts/autoscaling.md#llm-serving-signals and #sizing-to-the-request-slo; blank: not a target
SERVING_FIELDS = ["ttft_p99_target_s", "tpot_p99_target_s", "kv_cache_target", "queue_target", "slo_ttft_s",
                  "slo_tpot_s", "slo_min_gain"]
FIELDS += GROUP_FIELDS + SERVING_FIELDS
LABELS = {"gpus_per_replica": "GPUs per replica", "cpu_milli_per_replica": "CPU per replica (millicores)",
          "memory_mib_per_replica": "Memory per replica (MiB)", "autoscaling": "Autoscaling on",
          "peak_start": "Peak window from", "peak_end": "Peak window to",
          "scale_to_zero_idle_min": "Scale to zero after (idle minutes)", "busy_signal": "Scale on the busy signal",
          "offline": "Offline", "manual_deploy": "Being deployed by hand",
          "vertical": "Apply per-replica recommendations", "group_size": "Pods per replica (group size)",
          "startup_s": "Start-up time (s)", "exclusive_topology": "One block per group (exclusive topology)",
          "max_surge": "Max surge (groups)", "max_unavailable": "Max unavailable (groups)",
          "group_restart_policy": "When a pod's container restarts",
          "ttft_p99_target_s": "TTFT p99 target (s)", "tpot_p99_target_s": "TPOT p99 target (s)",
          "kv_cache_target": "KV-cache use target (0–1)", "queue_target": "Waiting requests per replica",
          "slo_ttft_s": "Request SLO: TTFT (s)", "slo_tpot_s": "Request SLO: TPOT (s)",
          "slo_min_gain": "Min gain per replica (0–1)"}
SCHEDULE_ROWS = 2  # blank schedule rows offered beyond the service's own


class ServiceForm(forms.Form):
    """The model's fields (types, bounds, help) without the model's own validation: the rules are
    `service_create`/`service_update`'s, one place for API and console."""

    def __init__(self, data=None, *, instance: InferenceService | None, user, initial=None):
        values = {**(initial or {}), **(_values_of(instance) if instance else {})}
        super().__init__(data, initial=values, label_suffix="")
        self.fields.update(forms.fields_for_model(InferenceService, fields=FIELDS, labels=LABELS, help_texts={
            "replicas": "Desired now; the autoscaler changes it within [min, max] when it is on."}))
        self.fields["department"] = forms.ModelChoiceField(
            queryset=Department.objects.restrict(user).order_by("name"), to_field_name="name")
        self.fields["gpu_model"] = forms.ModelChoiceField(
            queryset=GPUModel.objects.all(), to_field_name="name", required=False, label="GPU model",
            empty_label="none (CPU only)")
        self.fields["gpus_per_replica"].validators.append(MinValueValidator(0))
        self.fields["group_size"].validators.append(MinValueValidator(1))
        for name in GROUP_FIELDS:  # left out (a form of before groups): the model's default
            self.fields[name].required = False
        for name in ("peak_start", "peak_end"):
            self.fields[name].widget = forms.TimeInput(attrs={"type": "time"}, format="%H:%M")
        if instance:  # names are permanent and a service stays in its department (the API's rules)
            for name in ("name", "department"):
                self.fields[name].disabled = True

    def values(self) -> dict:
        """The cleaned fields as `service_create`/`service_update` keyword arguments."""
        values = {name: self.cleaned_data[name] for name in FIELDS if not self.fields[name].disabled}
        return {k: v for k, v in values.items() if not (k in GROUP_FIELDS and v in (None, ""))}


def _values_of(service: InferenceService) -> dict:
    values = {name: getattr(service, name) for name in FIELDS}
    values["department"] = service.department.name
    values["gpu_model"] = service.gpu_model.name if service.gpu_model_id else None
    return values


class ThresholdForm(forms.Form):
    """One metric's minRate / expectRate / maxRate; all three blank = no threshold on that metric."""

    min_rate = forms.FloatField(min_value=0, max_value=1, required=False, label="min")
    expect_rate = forms.FloatField(min_value=0, max_value=1, required=False, label="expect")
    max_rate = forms.FloatField(min_value=0, max_value=1, required=False, label="max")

    def clean(self):
        data = super().clean()
        rates = [data.get(k) for k in ("min_rate", "expect_rate", "max_rate")]
        if any(r is not None for r in rates) and any(r is None for r in rates):
            raise forms.ValidationError("give min, expect and max, or leave all three blank")
        return data

    def __init__(self, *args, metric: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.metric = metric  # fixed by the form's place, never read from the request
        self.label = ScalingThreshold.Metric(metric).label


def threshold_forms(data=None, service: InferenceService | None = None) -> list[ThresholdForm]:
    current = {t.metric: t for t in service.thresholds.all()} if service else {}
    forms_ = []
    for metric in ScalingThreshold.Metric.values:
        t = current.get(metric)
        initial = {"min_rate": t.min_rate, "expect_rate": t.expect_rate, "max_rate": t.max_rate} if t else {}
        forms_.append(ThresholdForm(data, prefix=f"t-{metric}", initial=initial, label_suffix="", metric=metric))
    return forms_


def thresholds_of(forms_: list[ThresholdForm]) -> list[dict]:
    return [{"metric": f.metric, **f.cleaned_data} for f in forms_ if f.cleaned_data.get("min_rate") is not None]


class ScheduleForm(forms.Form):
    """One scheduled-scaling window; a row left blank is no schedule."""

    weekdays = forms.CharField(max_length=32, required=False, initial="*", label="Days (cron)",
                               help_text='"*", "1-5", "mon-fri", "0,6"')
    start = forms.TimeField(required=False, widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"))
    end = forms.TimeField(required=False, widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"))
    min_replicas = forms.IntegerField(min_value=0, required=False, label="At least")

    def clean_weekdays(self) -> str:
        text = self.cleaned_data["weekdays"].strip() or "*"
        try:
            parse_weekdays(text)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from error
        return text

    def clean(self):
        data = super().clean()
        given = [data.get(k) for k in ("start", "end", "min_replicas")]
        if any(v is not None for v in given) and any(v is None for v in given):
            raise forms.ValidationError("give start, end and a minimum, or leave the row blank")
        return data

    @property
    def blank(self) -> bool:
        return self.cleaned_data.get("start") is None


def schedule_forms(data=None, service: InferenceService | None = None) -> list[ScheduleForm]:
    current = [{"weekdays": s.weekdays, "start": s.start, "end": s.end, "min_replicas": s.min_replicas}
               for s in service.schedules.all()] if service else []
    rows = current + [{} for _ in range(SCHEDULE_ROWS)]
    return [ScheduleForm(data, prefix=f"s-{i}", initial=initial, label_suffix="") for i, initial in enumerate(rows)]


def schedules_of(forms_: list[ScheduleForm]) -> list[dict]:
    return [f.cleaned_data for f in forms_ if not f.blank]


def apply_row_errors(rows: list[forms.Form], errors: dict[str, dict]) -> None:
    """A service's per-item errors ({"<index of the item it was given>": {field: [messages]}}) beside that
    row's fields."""
    for index, problems in errors.items():
        form = rows[int(index)]
        for field, messages in problems.items():
            for message in messages:
                form.add_error(field if field in form.fields else None, message)


def apply_schedule_errors(forms_: list[ScheduleForm], errors: dict[str, dict]) -> None:
    apply_row_errors([f for f in forms_ if not f.blank], errors)


def apply_threshold_errors(forms_: list[ThresholdForm], errors: dict[str, dict]) -> None:
    apply_row_errors([f for f in forms_ if f.cleaned_data.get("min_rate") is not None], errors)
