"""Create and edit an inference service with its scaling thresholds (the API's fields and service rules)."""
from django import forms
from django.core.validators import MinValueValidator

from colocation.models import InferenceService, ScalingThreshold
from scheduler.models import Department, GPUModel


FIELDS = ["name", "department", "gpu_model", "priority", "autoscaling", "replicas", "min_replicas", "max_replicas",
          "gpus_per_replica", "cpu_milli_per_replica", "memory_mib_per_replica"]
LABELS = {"gpus_per_replica": "GPUs per replica", "cpu_milli_per_replica": "CPU per replica (millicores)",
          "memory_mib_per_replica": "Memory per replica (MiB)", "autoscaling": "Autoscaling on"}


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
        if instance:  # names are permanent and a service stays in its department (the API's rules)
            for name in ("name", "department"):
                self.fields[name].disabled = True

    def values(self) -> dict:
        """The cleaned fields as `service_create`/`service_update` keyword arguments."""
        return {name: self.cleaned_data[name] for name in FIELDS if not self.fields[name].disabled}


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
