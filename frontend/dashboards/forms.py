from django import forms

from experiments.replay import TREES


class QuotaForm(forms.Form):
    """One quota's amounts; the service refuses amounts below what the department's jobs hold."""

    own = forms.DecimalField(max_digits=14, decimal_places=3, min_value=0, label="Own")
    borrowed = forms.DecimalField(max_digits=14, decimal_places=3, min_value=0, label="Borrowed")


class ReplayForm(forms.Form):
    """A what-if replay: a trace of the traces folder or an uploaded pod list, policies and knobs."""

    trace = forms.ChoiceField(required=False, label="Trace", help_text="an Alibaba 2023 pod list of the traces folder")
    upload = forms.FileField(required=False, label="…or upload a pod list",
                             help_text="CSV in the same schema (name,cpu_milli,memory_mib,num_gpu,gpu_milli,…)")
    policies = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, label="Policies")
    load_factor = forms.FloatField(initial=1.0, label="Load factor",
                                   help_text="arrivals this many times faster (run times unchanged)")
    inflate = forms.BooleanField(required=False, label="Inflate",
                                 help_text="FGD experiment: submit sampled pods until the first cannot be placed")
    tree = forms.ChoiceField(choices=[(t, t) for t in TREES], required=False, initial="flat", label="Quota tree",
                             help_text="flat: each Helios virtual cluster a department; helios: the virtual clusters "
                                       "grouped into divisions by size, with pools, lend and borrow limits and weights "
                                       "(tidal-fair shares idle GPUs by them). Docs: How-to → Replay a trace → "
                                       "Quota trees, fair shares and reclaims")

    def __init__(self, *args, traces: list[str], policies: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["trace"].choices = [("", "— upload instead —")] + [(t, t) for t in traces]
        self.fields["policies"].choices = [(p, p) for p in policies]

    def clean_tree(self) -> str:
        return self.cleaned_data["tree"] or "flat"  # not chosen: flat departments, as before trees


class ColocationForm(forms.Form):
    """A co-location simulation: lending whole machines against a static split, on the traffic traces."""

    days = forms.IntegerField(initial=1, min_value=1, max_value=7, label="Days",
                              help_text="simulated days of GenAI and World Cup traffic (1 to 7)")
    small = forms.BooleanField(required=False, initial=True, label="Small cluster",
                               help_text="a few dozen nodes instead of the trace's cluster: seconds, not minutes")
    lending = forms.ChoiceField(
        choices=[("threshold", "Thresholds only"), ("forecast", "Forecast-driven")], initial="threshold",
        required=False, widget=forms.RadioSelect, label="Lending",
        help_text="forecast-driven: take back ahead of the forecast rise, lend only what stays idle, keep jobs off "
                  "lent nodes they would outlive")

    def clean_lending(self) -> str:
        return self.cleaned_data["lending"] or "threshold"  # not chosen: today's threshold rules


class FragmentationForm(forms.Form):
    """The FGD placement experiment: a pod list of the traces folder and the placement policies to compare."""

    trace = forms.ChoiceField(label="Trace", help_text="an Alibaba 2023 pod list of the traces folder")
    policies = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, label="Placement policies")

    def __init__(self, *args, traces: list[str], policies: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["trace"].choices = [(t, t) for t in traces]
        self.fields["policies"].choices = [(p, p) for p in policies]

