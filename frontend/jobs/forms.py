"""The submit form. Field names are the API's, so the service's field errors land beside their fields."""
from django import forms
from django.urls import reverse

from core.models import Department, GPUModel
from scheduler.models import Framework, Topology, TrainingJob
from scheduler.submission import MAX_WORKERS


ANY_MODEL = "any certified model (none: CPU only)"


class FrameworkChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj: Framework) -> str:
        return str(obj)


class JobForm(forms.Form):
    department = forms.ModelChoiceField(queryset=Department.objects.none(), to_field_name="name",
                                        help_text="Its quota is charged.")
    name = forms.CharField(max_length=128)
    image = forms.CharField(max_length=256, help_text="Container image, e.g. registry.local/resnet:1")
    command = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}))
    framework = FrameworkChoice(queryset=Framework.objects.order_by("name", "version"), empty_label=None)
    gpu_model = forms.ModelChoiceField(queryset=GPUModel.objects.none(), to_field_name="name", required=False,
                                       label="GPU model", empty_label=ANY_MODEL,
                                       help_text="Only the models this framework is certified on. If it has no room, "
                                                 "Tidal uses the certified model with the most idle GPUs; any: "
                                                 "placement chooses among them.")
    workers = forms.IntegerField(min_value=1, max_value=MAX_WORKERS, initial=1, required=False,
                                 help_text="Above 1, a distributed job (torchrun, MultiWorkerMirrored, Paddle fleet): "
                                           "its workers start together or not at all. GPUs, CPU and memory below are "
                                           "per worker.")
    topology = forms.ChoiceField(choices=Topology.choices, initial=Topology.PACK, required=False,
                                 help_text="Where a gang's workers go; one worker ignores it.")
    gpus = forms.DecimalField(label="GPUs", min_value=0, max_digits=6, decimal_places=3, initial=1,
                              help_text="Per worker. Fractions below 1 share a GPU (e.g. 0.5), for one worker only; "
                                        "above 1, whole GPUs.",
                              widget=forms.NumberInput(attrs={"step": "0.05"}))
    cpu_milli = forms.IntegerField(label="CPU (millicores)", min_value=1, initial=4000, help_text="1000 = 1 core.")
    memory_mib = forms.IntegerField(label="Memory (MiB)", min_value=1, initial=16384, help_text="1024 = 1 GiB.")
    expected_duration_min = forms.IntegerField(label="Expected duration (minutes)", min_value=1, required=False,
                                               help_text="Optional; jobs over 12 h go to the fixed training pool.")
    # ticked to opt out (an unticked box posts nothing: a form or script that leaves it out keeps the default)
    non_preemptible = forms.BooleanField(required=False, label="Never preempt",
                                         help_text="Runs on its department's own quota only (never borrowed), so it "
                                                   "may wait longer.")
    task_key = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, label_suffix="", **kwargs)
        self.fields["department"].queryset = Department.objects.restrict(user).order_by("name")
        self.fields["framework"].widget.attrs.update({"hx-get": reverse("job-gpu-models"), "hx-target": "#id_gpu_model",
                                                      "hx-trigger": "change", "hx-swap": "innerHTML"})
        self.fields["gpu_model"].queryset = certified_models(self._framework())

    def _framework(self) -> Framework | None:
        """The framework chosen (posted, else initial, else the first): it decides the GPU model choices."""
        key = self.data.get("framework") if self.is_bound else self.initial.get("framework")
        key = getattr(key, "pk", key)
        frameworks = self.fields["framework"].queryset
        return frameworks.filter(pk=key).first() if str(key or "").isdigit() else frameworks.first()

    def submission(self) -> dict:
        """The cleaned form as `job_submit`'s keyword arguments."""
        data = dict(self.cleaned_data)
        minutes = data.pop("expected_duration_min")
        data["expected_duration_s"] = minutes * 60 if minutes else None
        data["workers"] = data["workers"] or 1  # left blank: one worker, as before the field existed
        data["topology"] = data["topology"] or Topology.PACK
        data["preemptible"] = not data.pop("non_preemptible")
        return data


def certified_models(framework: Framework | None):
    return framework.certified_on.order_by("name") if framework else GPUModel.objects.none()


def initial_from(job: TrainingJob) -> dict:
    """"Submit again": the finished job's request, same task key so its profile history carries over."""
    return {
        "department": job.department.name, "name": job.name, "image": job.image, "command": job.command,
        "framework": job.framework_id, "gpu_model": job.gpu_model.name if job.gpu_model_id else None,
        "workers": job.workers, "topology": job.topology, "non_preemptible": not job.preemptible,
        "gpus": job.gpus, "cpu_milli": job.cpu_milli, "memory_mib": job.memory_mib,
        "expected_duration_min": job.expected_duration_s // 60 if job.expected_duration_s else None,
        "task_key": job.task_key,
    }
